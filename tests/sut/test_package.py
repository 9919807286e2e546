"""Package rules: every module declares `__all__`, and sut never imports loadgen.

The wire protocol sut shares with loadgen is the neutral package `oipwire`, not loadgen's.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "sut"
MODULES = sorted(  # sut/server/ has its own owner and tests
    ".".join(p.relative_to(ROOT.parent).with_suffix("").parts).removesuffix(".__init__")
    for p in ROOT.rglob("*.py")
    if p.relative_to(ROOT).parts[0] != "server"
)


@pytest.mark.parametrize("name", MODULES)
def test_module_declares_all_and_defines_it(name: str) -> None:
    module = importlib.import_module(name)
    exported = module.__all__
    assert sorted(exported) == sorted(set(exported))
    assert all(hasattr(module, item) for item in exported)


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: p.name)
def test_sut_never_imports_loadgen(path: Path) -> None:
    """Not even the wire protocol: that is `oipwire`'s."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [f"{node.module or ''}.{alias.name}" for alias in node.names]
        else:
            continue
        found = [n for n in names if n.startswith("loadgen")]
        assert not found, (path, found)
