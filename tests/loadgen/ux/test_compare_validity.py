"""`compare` says when a side is INVALID instead of claiming a direction, and formats
durations with the one formatter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.api import run_test
from loadgen.cli.main import main
from loadgen.plan.settings import load_settings

BASE = ["preset='dev'", "min_duration_s=0.5", "min_query_count=100", "target_qps=1000",
        "energy='off'", "max_issue_lag_ms=10000"]


def _run(out: Path, *more: str) -> bool:
    return run_test(load_settings(None, [*BASE, *more]), "sim:service=const:1ms,servers=4",
                    out_dir=out).valid


def test_invalid_sides_get_no_confident_direction(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert not _run(tmp_path / "a", "target_latency_ms=0.01")  # every query over the SLO
    assert not _run(tmp_path / "b", "target_latency_ms=0.02")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"),
                 "--vary", "settings.target_latency_ms"]) == 0
    out = capsys.readouterr().out
    assert "INVALID (1 of 1: early_stopping)" in out
    assert "A and B INVALID" in out and "does not say which is better" in out
    for line in out.splitlines():
        assert not line.rstrip().endswith(("B higher", "B lower")), line
    assert "e+" not in out and "latency_p50 " in out


@pytest.mark.serial  # both sides must be VALID at 1 ms service: skips on a loaded host
def test_valid_sides_keep_their_verdicts(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    slow = ["target_latency_ms=1000"]
    if not (_run(tmp_path / "a", *slow) and _run(tmp_path / "b", *slow, "target_qps=500")):
        pytest.skip("the host is too busy for a VALID run")
    assert main(["compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json",
                 "--vary", "settings.target_qps"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["invalid"] == {"a": [], "b": []}
