"""The base package is the load generator alone: no torch, no scikit-learn; the serving
harness comes with the `sut` extra, and asking for it without the extra names the extra."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from loadgen.adapters import extras
from loadgen.adapters.registry import make_sut
from loadgen.cli.main import main
from loadgen.errors import SutSpecError

ROOT = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "scikit-learn")

# Runs the CLI in a fresh interpreter where torch and scikit-learn cannot be imported.
WITHOUT_EXTRA = """
import importlib.util, sys
_find = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a, **k: (
    None if name.split(".")[0] in ("torch", "sklearn") else _find(name, *a, **k))
sys.modules["torch"] = None
sys.modules["sklearn"] = None
from loadgen.cli.main import main
code = main(sys.argv[1:])
assert "torch" not in sys.modules or sys.modules["torch"] is None
sys.exit(code)
"""


def _project() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_base_dependencies_hold_no_torch_and_the_sut_extra_does() -> None:
    project = _project()
    base = " ".join(project["dependencies"])  # type: ignore[arg-type]
    extras_ = project["optional-dependencies"]  # type: ignore[index]
    for heavy in HEAVY:
        assert heavy not in base
        assert any(dep.startswith(heavy) for dep in extras_["sut"])
    assert "loadgen[sut]" in extras_["dev"]
    assert {"ray", "gpu", "dev", "sut"} <= set(extras_)


def test_builtin_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(extras, "missing_modules", lambda modules: ["torch", "scikit-learn"])
    with pytest.raises(SutSpecError, match=r"loadgen\[sut\]") as err:
        make_sut("builtin:digits")
    assert "torch and scikit-learn" in str(err.value)


def test_serve_without_the_extra_exits_2_naming_it(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(extras, "missing_modules", lambda modules: ["torch"])
    assert main(["serve", "--model", "mlp"]) == 2
    assert "pip install 'loadgen[sut]'" in capsys.readouterr().err


def test_the_extra_present_is_not_reported_missing() -> None:
    assert extras.missing_modules(("json", "no_such_module_xyz")) == ["no_such_module_xyz"]


def test_a_null_run_needs_neither_torch_nor_scikit_learn(tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, "run", "--sut", "null", "--out", str(out),
         "--quiet", "--set", "preset='dev'", "--set", "min_duration_s=1",
         "--set", "min_query_count=500", "--set", "target_qps=1000", "--set", "energy='off'"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert done.returncode in (0, 1), done.stderr
    assert json.loads((out / "result.json").read_text())["settings"]["scenario"] == "Server"


def test_builtin_without_the_extra_exits_2_before_the_run(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_EXTRA, "run", "--sut", "builtin:digits", "--quiet",
         "--out", str(tmp_path / "run"), "--set", "preset='dev'"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert done.returncode == 2
    assert "loadgen[sut]" in done.stderr
    assert not (tmp_path / "run" / "result.json").exists()


def test_the_images_and_make_test_keep_the_serving_harness() -> None:
    for image in ("Dockerfile.sut", "Dockerfile.loadgen"):  # they serve and run builtin: models
        assert '".[sut]"' in (ROOT / "docker" / image).read_text(), image
    make = (ROOT / "Makefile").read_text()
    assert "-e '.[dev]'" in make and "-e '.[sut]'" in make and "torch==2.13.0" in make


def test_make_demo_installs_no_dev_extra_and_says_what_it_installs() -> None:
    done = subprocess.run(["make", "-n", "demo", "VENV=/nonexistent/venv"], cwd=ROOT,
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    assert "'.[sut]'" in done.stdout and ".[dev]" not in done.stdout
    assert "make demo: installing into /nonexistent/venv" in done.stdout
    assert "|| [ $? -eq 1 ]" in done.stdout  # INVALID still exits 0; 2 and 3 fail
