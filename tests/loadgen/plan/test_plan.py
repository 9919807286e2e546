"""loadgen.plan.plan: the facts a run derives from its settings, computed once."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.plan.arrivals import Poisson, Steps, Trace
from loadgen.plan.plan import NO_SLO_NS, RunPlan
from loadgen.plan.settings import IssueMode, settings_from_mapping

DEV = {"preset": "dev"}


def _plan(**values: Any) -> RunPlan:
    return RunPlan.of(settings_from_mapping(DEV | values))


@pytest.mark.parametrize(("values", "mode"), [
    ({"scenario": "Server", "target_latency_ms": 10}, IssueMode.OPEN),
    ({"scenario": "Server", "target_latency_ms": 10, "arrival": "closed"}, IssueMode.CLOSED),
    ({"scenario": "SingleStream"}, IssueMode.CLOSED),
    ({"scenario": "MultiStream"}, IssueMode.CLOSED),
    ({"scenario": "Offline"}, IssueMode.OFFLINE),
    ({"scenario": "Offline", "mode": "accuracy"}, IssueMode.ACCURACY),
    ({"scenario": "Server", "target_latency_ms": 10, "mode": "accuracy"}, IssueMode.ACCURACY),
])
def test_issue_mode(values: dict[str, Any], mode: IssueMode) -> None:
    plan = _plan(**values)
    assert plan.issue_mode is mode
    assert plan.open_loop == (mode is IssueMode.OPEN)
    assert (plan.arrival is not None) == plan.open_loop


def test_bounds_are_integer_nanoseconds() -> None:
    plan = _plan(target_latency_ms=0.1, warmup_s=0.3, min_duration_s=2.5, max_duration_s=7,
                 query_timeout_ms=250, drain_timeout_s=1.5, max_issue_lag_ms=2, window_s=0.5)
    assert (plan.slo_ns, plan.warmup_ns, plan.min_duration_ns, plan.max_duration_ns) == (
        100_000, 300_000_000, 2_500_000_000, 7_000_000_000)
    assert (plan.query_timeout_ns, plan.drain_timeout_ns, plan.max_issue_lag_ns,
            plan.window_ns) == (250_000_000, 1_500_000_000, 2_000_000, 500_000_000)
    assert plan.slo_bound_ns == 100_000


def test_no_slo_means_no_latency_is_over_it() -> None:
    plan = _plan(scenario="SingleStream")
    assert plan.slo_ns == 0 and plan.slo_bound_ns == NO_SLO_NS


def test_accuracy_runs_measure_from_the_first_query() -> None:
    assert _plan(scenario="SingleStream", mode="accuracy", warmup_s=2).warmup_ns == 0
    assert _plan(scenario="SingleStream", warmup_s=2).warmup_ns == 2_000_000_000


@pytest.mark.parametrize(("qps", "seconds", "samples"), [
    (100, 60, 6600),  # float says 6600.000000000001
    (1000, 0.1, 110),
    (3, 7.3, 25),  # 24.09 -> 25
])
def test_offline_query_size_is_exact(qps: float, seconds: float, samples: int) -> None:
    plan = _plan(scenario="Offline", target_qps=qps, min_duration_s=seconds, min_query_count=1)
    assert plan.offline_sample_count == samples


def test_offline_query_size_respects_the_query_minimum() -> None:
    plan = _plan(scenario="Offline", target_qps=1, min_duration_s=1, min_query_count=500)
    assert plan.offline_sample_count == 500
    assert _plan(scenario="Server", target_latency_ms=5).offline_sample_count == 0


def test_concurrency_applies_to_closed_server_and_accuracy_only() -> None:
    assert _plan(scenario="Server", target_latency_ms=5, arrival="closed",
                 concurrency=8).concurrency == 8
    assert _plan(scenario="Offline", mode="accuracy", concurrency=4).concurrency == 4
    assert _plan(scenario="SingleStream", concurrency=8).concurrency == 1
    assert _plan(scenario="Server", target_latency_ms=5, concurrency=8).concurrency == 1


def test_steps_plan_its_process_and_window_starts() -> None:
    plan = _plan(target_latency_ms=5, arrival="steps", steps=[[0, 100], [2, 300]],
                 min_duration_s=4)
    assert isinstance(plan.arrival, Steps) and plan.steps is plan.arrival
    assert plan.step_starts_ns == (0, 2_000_000_000)
    assert _plan(target_latency_ms=5).steps is None
    assert isinstance(_plan(target_latency_ms=5).arrival, Poisson)


def test_a_trace_is_read_once_into_the_plan(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("offset_s\n0\n0.5\n1.25\n")
    plan = _plan(target_latency_ms=5, arrival="trace", trace_file=str(trace))
    trace.unlink()  # the plan holds the offsets; nothing reads the file again
    assert isinstance(plan.arrival, Trace)
    assert plan.arrival.offsets_ns.tolist() == [0, 500_000_000, 1_250_000_000]


def test_as_dict_is_plain_json_without_the_settings() -> None:
    plan = _plan(target_latency_ms=5, arrival="steps", steps=[[0, 100], [2, 300]],
                 min_duration_s=4)
    doc = json.loads(json.dumps(plan.as_dict()))
    assert doc["issue_mode"] == "open" and doc["slo_ns"] == 5_000_000
    assert doc["arrival"]["kind"] == "steps" and doc["step_starts_ns"] == [0, 2_000_000_000]
    assert doc["library"] == {"total": 1024, "performance_count": 1024,
                              "seed": plan.settings.qsl_rng_seed}
    assert "settings" not in doc
