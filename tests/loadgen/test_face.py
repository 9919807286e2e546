"""loadgen's public face: `import loadgen` exports the API, and the wheel ships py.typed."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import loadgen

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = {  # what a user needs to run a test and read its result, by the module it lives in
    "loadgen.api": {"Monitor", "run_async", "run_test"},
    "loadgen.adapters.base": {"CompletionSink", "SystemUnderTest", "Timers"},
    "loadgen.adapters.registry": {"make_sut"},
    "loadgen.errors": {"LoadgenError", "ResultError", "SettingsError", "SutError",
                       "SutSpecError"},
    "loadgen.judge.stats": {"RunStats"},
    "loadgen.judge.verdict": {"Reason", "ReasonCode", "Verdict"},
    "loadgen.plan.plan": {"RunPlan"},
    "loadgen.plan.settings": {"IssueMode", "Scenario", "TestSettings", "load_settings",
                              "settings_from_mapping"},
    "loadgen.report.result": {"RunResult", "read_result"},
}


def test_exported_names_are_the_public_api_sorted() -> None:
    assert loadgen.__all__ == sorted(loadgen.__all__)
    assert set(loadgen.__all__) == set().union(*PUBLIC.values())


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_each_export_is_its_home_modules_own(module: str) -> None:
    home = importlib.import_module(module)
    for name in PUBLIC[module]:
        assert name in home.__all__, (module, name)
        assert getattr(loadgen, name) is getattr(home, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="run_tset"):
        _ = loadgen.run_tset  # type: ignore[attr-defined]


def test_import_loadgen_alone_gives_run_test() -> None:
    code = "import loadgen; print(loadgen.run_test.__module__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "loadgen.api"


@pytest.mark.functional
def test_the_wheel_ships_py_typed_and_the_proto(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for package in ("loadgen", "sut", "oipwire"):
        shutil.copytree(ROOT / package, src / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps",
                    "--no-build-isolation", "-q", "-w", str(tmp_path / "dist")],
                   check=True, capture_output=True, timeout=240)
    wheel = next((tmp_path / "dist").glob("loadgen-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"loadgen/py.typed", "oipwire/py.typed",
            "oipwire/proto/grpc_predict_v2.proto"} <= names
    assert not any(n.startswith("tests/") for n in names)
