"""The package face: every module declares `__all__`, the face re-exports exactly those
names, each module imports alone, and importing oipwire pulls in no transport."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import oipwire

ROOT = Path(oipwire.__file__).parent
MODULES = sorted(f"oipwire.{path.stem}" for path in ROOT.glob("*.py") if path.stem != "__init__")


@pytest.mark.parametrize("name", MODULES)
def test_module_all_lists_the_public_names_it_defines(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__file__ is not None and module.__doc__
    defined = set()
    for node in ast.parse(Path(module.__file__).read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            defined.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            defined.update(t.id for t in targets if isinstance(t, ast.Name))
    assert sorted(module.__all__) == sorted(n for n in defined if not n.startswith("_"))


def test_face_reexports_every_module_all() -> None:
    names = [n for m in MODULES for n in importlib.import_module(m).__all__]
    assert len(names) == len(set(names))
    assert sorted(oipwire.__all__) == sorted(names)  # the order is ruff's (RUF022)
    assert len(oipwire.__all__) == len(set(oipwire.__all__))
    for name in MODULES:
        module = importlib.import_module(name)
        assert all(getattr(oipwire, n) is getattr(module, n) for n in module.__all__)
    assert (ROOT / "py.typed").is_file()


@pytest.mark.parametrize("name", ["oipwire", *MODULES])
def test_imports_alone_without_transport(name: str) -> None:
    code = (f"import sys, {name}; bad = {{'aiohttp', 'grpc', 'google.protobuf', 'torch',"
            " 'loadgen', 'sut'} & set(sys.modules); assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
