"""`python -m loadgen run` from a copy of the source tree that is not installed (PYTHONPATH
only, as `scripts/gpu_checks.sh` runs on a GPU host): the run ends with its result.json."""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[3]


def _site_without_loadgen(into: Path) -> Path:
    """This environment's packages, linked one by one, less loadgen's own install records."""
    into.mkdir()
    for folder in site.getsitepackages():
        for entry in Path(folder).iterdir():
            if entry.name.startswith(("loadgen-", "__editable__")) or entry.suffix == ".pth":
                continue
            if not (into / entry.name).exists():
                (into / entry.name).symlink_to(entry)
    return into


def test_a_run_from_an_uninstalled_tree_writes_its_result(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for package in ("loadgen", "sut", "oipwire", "scenarios"):
        shutil.copytree(ROOT / package, tree / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    packages = _site_without_loadgen(tmp_path / "site")
    env = {**os.environ, "PYTHONPATH": f"{tree}{os.pathsep}{packages}"}
    probe = subprocess.run(  # -S: no site-packages, so only what PYTHONPATH names
        [sys.executable, "-S", "-c", ("import importlib.metadata as m, loadgen; "
         "print(loadgen.__file__); m.version('loadgen')")],
        cwd=tree, capture_output=True, text=True, env=env, timeout=60, check=False)
    assert probe.stdout.startswith(str(tree)) and "PackageNotFoundError" in probe.stderr
    out = tmp_path / "run"
    p = subprocess.run(
        [sys.executable, "-S", "-m", "loadgen", "run", "scenarios/server.toml", "--sut",
         "sim:service=const:200us", "--out", str(out), "--quiet", "--set", "preset='dev'",
         "--set", "min_duration_s=0.3", "--set", "min_query_count=100", "--set",
         "target_qps=500"], cwd=tree, capture_output=True, text=True, env=env, timeout=120,
        check=False)
    assert p.returncode in (0, 1), p.stderr
    result = json.loads((out / "result.json").read_text())
    assert result["schedule"]["loadgen_version"] == result["environment"]["packages"]["loadgen"]
    assert (out / "summary.txt").stat().st_size > 0
