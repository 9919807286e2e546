"""Progress lines: the plan before the first query, then percent and ETA toward both minimums."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loadgen.live.progress import ProgressLines, plan_line
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import settings_from_mapping
from loadgen.record.progress import Progress

ROOT = Path(__file__).resolve().parents[3]
S = 1_000_000_000


def _plan(**values: Any) -> RunPlan:
    return RunPlan.of(settings_from_mapping(values))


def test_the_mlperf_server_plan_says_how_long_and_suggests_dev() -> None:
    plan = _plan(target_qps=100, target_latency_ms=50)  # 270,336 queries at 100 QPS
    assert plan.expected_s == pytest.approx(2703.36)
    line = plan_line(plan)
    assert line.startswith("plan: Server at 100 QPS, at least 270336 queries and 600 s")
    assert "about 45:03 (the query count governs)" in line and "preset=dev" in line


def test_a_short_dev_plan_is_not_told_to_shorten() -> None:
    plan = _plan(preset="dev", target_qps=100, target_latency_ms=50)
    assert plan.expected_s == 5.0
    assert "about 0:05" in plan_line(plan) and "preset" not in plan_line(plan)


def test_closed_loop_plans_have_no_expected_duration() -> None:
    plan = _plan(scenario="SingleStream")
    assert plan.expected_s is None
    assert "about" not in plan_line(plan)


def test_the_lesser_fraction_governs_and_the_longer_remainder_is_the_eta() -> None:
    lines = ProgressLines(_plan(preset="dev", min_duration_s=10, min_query_count=1000,
                                target_qps=50, target_latency_ms=50))
    # 4 s in, 200 queries: time says 40%, queries 20%; 800 more at 50/s is 16 s > 6 s left
    fraction, eta = lines.fraction_and_eta(Progress(4 * S, 200, 200, 0, 0))
    assert fraction == pytest.approx(0.2) and eta == pytest.approx(16.0)
    # 8 s in, 1000 queries: the count is met, 2 s of the duration remain
    fraction, eta = lines.fraction_and_eta(Progress(8 * S, 1000, 990, 10, 0))
    assert fraction == pytest.approx(0.8) and eta == pytest.approx(2.0)
    assert lines.fraction_and_eta(Progress(0, 0, 0, 0, 0))[1] is None  # no rate yet


def test_warm_up_counts_toward_the_eta_not_the_fraction() -> None:
    lines = ProgressLines(_plan(preset="dev", warmup_s=2, min_duration_s=4, min_query_count=1,
                                target_qps=50, target_latency_ms=50))
    fraction, eta = lines.fraction_and_eta(Progress(1 * S, 50, 50, 0, 0))
    assert fraction == 0.0 and eta == pytest.approx(5.0)


def test_a_line_shows_percent_eta_and_counts() -> None:
    out = io.StringIO()
    lines = ProgressLines(_plan(preset="dev", target_qps=100, target_latency_ms=50), out)
    lines(Progress(2 * S, 200, 198, 2, 1))
    assert out.getvalue().strip() == (
        "[    2.0s]  40.0%  ETA 0:03  issued 200  done 198  in flight 2  errors 1  (99/s)")


@pytest.mark.functional
def test_loadgen_run_in_a_pipe_prints_the_plan_then_percent_lines(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "loadgen", "run", str(ROOT / "scenarios" / "server.toml"),
         "--sut", "sim:service=const:1ms", "--out", str(tmp_path), "--set", "preset='dev'",
         "--set", "min_duration_s=4.5"], capture_output=True, text=True, timeout=120,
        check=False)
    assert run.returncode in (0, 1), run.stderr
    lines = run.stderr.splitlines()
    assert lines[0].startswith("plan: Server at ") and ": about 0:0" in lines[0]
    progress = [line for line in lines if line.startswith("[")]
    assert len(progress) >= 2, lines
    assert all("%  ETA " in line for line in progress)
    percents = [float(line.split("]")[1].split("%")[0]) for line in progress]
    assert percents == sorted(percents) and 0 < percents[-1] <= 100
