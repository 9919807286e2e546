"""Offline ignores warm-up (with a warning), and a run whose measured window holds nothing
says why."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.cli.main import main
from loadgen.judge.verdict import ReasonCode, evaluate
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import settings_from_mapping
from tests.loadgen.judge.test_verdict import _plan, _stats


def test_offline_plans_no_warmup_and_warns_it_ignored_one() -> None:
    plan = RunPlan.of(settings_from_mapping({"scenario": "Offline", "warmup_s": 1,
                                             "target_qps": 100, "min_duration_s": 1}))
    assert plan.warmup_ns == 0
    verdict = evaluate(plan, _stats(plan))
    assert any("warmup_s = 1 ignored" in w and "Offline" in w for w in verdict.warnings)


@pytest.mark.parametrize(("changes", "why"), [
    ({}, "every query was issued in the warm-up (warmup_s = 1 s)"),
    ({"errors": 7}, "7 queries failed"),
])
def test_an_empty_measured_window_says_why(changes: dict[str, int], why: str) -> None:
    plan = _plan()
    stats = _stats(plan, queries=0, samples=0, **changes)
    reasons = evaluate(plan, stats).reasons
    assert reasons[0].code is ReasonCode.NOTHING_MEASURED and why in reasons[0].text


def test_offline_with_the_server_files_warmup_measures_its_query(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    code = main(["run", "scenarios/server.toml", "--sut", "null", "--out", str(out), "--quiet",
                 "--set", "scenario='Offline'", "--set", "preset='dev'",
                 "--set", "min_duration_s=0.2", "--set", "target_qps=200"])
    result = json.loads((out / "result.json").read_text())
    assert result["settings"]["warmup_s"] == 1  # the file's, kept and ignored
    assert code in (0, 1) and result["samples"] > 0  # none discarded as warm-up
    assert any("warmup_s = 1 ignored" in w for w in result["warnings"])
