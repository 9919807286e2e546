"""Scenario semantics on the engine, with fake and null SUTs."""

import numpy as np
import pytest

from loadgen.adapters.null import NullSut
from loadgen.api import run_async, run_loop
from loadgen.judge.verdict import ReasonCode
from loadgen.plan.settings import load_settings
from tests.fairness import skip_if_host_busy, skip_if_host_unfair
from tests.loadgen.fakes import FunctionSut

MS = 1_000_000
# serial: most of these time 1-100 ms services and issue lag on the engine, which a host
# loaded by other tests moves (they skip then, with the measured load)
pytestmark = pytest.mark.serial


def _run(sut, *overrides):
    settings = load_settings(None, ["preset='dev'", "min_duration_s=0.2", *overrides])
    return run_loop(run_async(settings, sut))


def test_single_stream_keeps_one_query_in_flight():
    sut = FunctionSut(lambda q, s, now: [1 * MS])
    r = _run(sut, "scenario='SingleStream'", "min_query_count=50")
    assert sut.max_in_flight == 1
    assert r.stats.queries >= 50 and r.valid, r.verdict.reasons
    # each next query is issued right after the previous completes: latency ~ service time
    if r.stats.latency_ns.p50 >= 1.5 * MS:
        skip_if_host_busy(r.to_dict(), f"median latency {r.stats.latency_ns.p50 / MS:.2f} ms"
                                       " for a 1 ms service")
    assert 1 * MS <= r.stats.latency_ns.p50 < 1.5 * MS
    issue_times = np.array([t for _, _, t in sut.issued])
    assert np.diff(issue_times).min() >= 1 * MS


def test_multi_stream_issues_eight_samples_and_times_the_slowest():
    delays = [k * MS for k in range(1, 9)]
    sut = FunctionSut(lambda q, s, now: delays[: len(s)])
    r = _run(sut, "scenario='MultiStream'", "min_query_count=20")
    assert {n for _, n, _ in sut.issued} == {8}
    assert sut.max_in_flight == 1
    # query latency is the slowest sample (8 ms); per-sample latencies spread 1..8 ms
    p50, low = r.stats.query_latency_ns.p50, r.stats.latency_ns.min
    if p50 >= 9 * MS or low >= 1.2 * MS:
        skip_if_host_busy(r.to_dict(), f"median query latency {p50 / MS:.2f} ms for 8 ms, the "
                                       f"fastest sample {low / MS:.2f} ms for 1 ms")
    assert 8 * MS <= r.stats.query_latency_ns.p50 < 9 * MS
    assert r.stats.latency_ns.min < 1.2 * MS and r.stats.latency_ns.max >= 8 * MS
    assert r.headline.name.endswith("p99_latency_ns")


def test_server_keeps_issuing_through_a_stall_and_counts_from_schedule():
    stall_from, stall_until = None, None

    def respond(q, s, now):
        nonlocal stall_from, stall_until
        if stall_from is None:
            stall_from, stall_until = now + 100 * MS, now + 300 * MS
        if stall_from <= now < stall_until:
            return [stall_until - now]  # everything sent during the stall waits for its end
        return [100_000]

    sut = FunctionSut(respond)
    r = _run(sut, "target_qps=1000", "target_latency_ms=50", "min_duration_s=0.5",
             "min_query_count=100")
    issued = np.array([t for _, _, t in sut.issued])
    during = ((issued >= stall_from) & (issued < stall_until)).sum()
    # open loop: about 200 ms x 1000 QPS issued while the SUT answered nothing
    assert 150 <= during <= 260
    assert sut.max_in_flight >= 150
    # those queries count from their scheduled times: p99 and max reflect the stall
    assert r.stats.latency_ns.max >= 180 * MS
    assert r.stats.overlatency >= 100
    assert not r.valid and ReasonCode.EARLY_STOPPING in r.verdict.codes


def test_offline_issues_one_query_with_every_sample():
    sut = FunctionSut(lambda q, s, now: [2 * MS])
    r = _run(sut, "scenario='Offline'", "target_qps=1000", "min_duration_s=0.1",
             "min_query_count=1")
    assert len(sut.issued) == 1
    assert sut.issued[0][1] == 110  # 1.1 x 1000 QPS x 0.1 s
    assert r.stats.samples == 110 and r.stats.queries == 1


def test_null_sut_run_is_valid_and_fast():
    # speed is judged by benchmarks/issue_capacity.py; here a loaded CI box may stall ms
    r = _run(NullSut(), "target_qps=5000", "target_latency_ms=50", "min_query_count=500",
             "max_issue_lag_ms=50")
    skip_if_host_unfair(r.to_dict())
    assert r.valid, r.verdict.reasons
    assert r.stats.queries >= 500
    if r.stats.issue_lag_ns.p50 >= 1 * MS:
        skip_if_host_busy(r.to_dict(), f"median issue lag {r.stats.issue_lag_ns.p50 / MS:.2f} ms")
    assert r.stats.issue_lag_ns.p50 < 1 * MS
    assert r.stats.qps_scheduled == pytest.approx(5000, rel=0.1)


def test_closed_loop_concurrency_and_warning():
    sut = FunctionSut(lambda q, s, now: [2 * MS])
    r = _run(sut, "arrival='closed'", "concurrency=4", "target_latency_ms=50",
             "min_query_count=50")
    assert sut.max_in_flight == 4
    assert any("closed-loop" in w for w in r.verdict.warnings)


def test_a_sut_that_never_answers_ends_invalid_after_the_drain():
    sut = FunctionSut(lambda q, s, now: None)
    r = _run(sut, "target_qps=200", "target_latency_ms=50", "drain_timeout_s=0.2",
             "min_query_count=10")
    assert r.stats.unfinished == r.stats.errors > 0
    assert r.stats.errors_by_kind == {"unfinished": r.stats.errors}
    assert not r.valid


def test_query_timeout_fails_slow_queries():
    sut = FunctionSut(lambda q, s, now: [50 * MS] if q % 2 else [MS])
    r = _run(sut, "target_qps=200", "target_latency_ms=100", "query_timeout_ms=20",
             "min_query_count=10")
    timeouts = r.stats.errors_by_kind.get("timeout", 0)
    if r.stats.latency_ns.max >= 20 * MS:
        late_ms = r.stats.latency_ns.max / MS
        skip_if_host_busy(r.to_dict(), f"a 1 ms query answered after {late_ms:.1f} ms, past the"
                                       " 20 ms timeout")
    assert timeouts > 10
    assert r.stats.latency_ns.max < 20 * MS
    assert not r.valid


def test_warmup_queries_are_not_measured():
    sut = FunctionSut(lambda q, s, now: [MS])
    r = _run(sut, "target_qps=1000", "target_latency_ms=50", "warmup_s=0.2",
             "min_query_count=10")
    warm = len(sut.issued) - r.stats.queries
    if warm <= 100:  # about 200 scheduled in the 0.2 s warm-up
        skip_if_host_busy(r.to_dict(), f"{warm} queries issued in the warm-up where about 200"
                                       " are scheduled")
    assert warm > 100
    assert not any("no warm-up" in w for w in r.verdict.warnings)


def test_a_plan_longer_than_planned_ahead_is_issued_whole_and_in_order(tmp_path, monkeypatch):
    from loadgen.engine import runner
    from loadgen.plan.plan import RunPlan
    from loadgen.plan.schedule import open_loop_offsets
    from loadgen.record.querylog import read_binary

    monkeypatch.setattr(runner, "PLAN_AHEAD_VALUES", 4096)  # 2048 one-sample queries ahead
    settings = load_settings(None, ["preset='dev'", "target_qps=20000", "target_latency_ms=50",
                                    "min_duration_s=0.4", "warmup_s=0", "min_query_count=100",
                                    "max_issue_lag_ms=1000"])
    r = run_loop(run_async(settings, NullSut(), log_dir=tmp_path))
    want = np.concatenate(list(open_loop_offsets(RunPlan.of(settings))))
    assert want.size > 3 * 2048
    rows, _ = read_binary(tmp_path)
    assert np.array_equal(rows["query_id"], np.arange(want.size))
    assert np.array_equal(rows["scheduled_ns"], want)  # relative to the run's start
    assert r.stats.queries == want.size


class _ThreadedSut(FunctionSut):
    """A fake that says its work runs in threads of this process (needs the GIL)."""

    shares_gil = True


@pytest.mark.parametrize("sut_class, waits_without_gil", [(FunctionSut, False),
                                                          (_ThreadedSut, True)])
def test_engine_waits_without_the_gil_only_for_sut_threads(monkeypatch, sut_class,
                                                           waits_without_gil):
    from loadgen.engine import runner

    targets = []
    real = runner._sleep_until
    monkeypatch.setattr(runner, "_sleep_until", lambda t: targets.append(t) or real(t))
    sut = sut_class(lambda q, s, now: [100_000])
    r = _run(sut, "target_qps=2000", "target_latency_ms=50", "min_query_count=200")
    assert r.stats.queries >= 200 and r.stats.errors == 0
    assert (len(targets) > 100) is waits_without_gil


def test_sleep_until_returns_at_or_after_its_target():
    import time

    from loadgen.engine.runner import _sleep_until

    for ahead_ns in (0, 50_000, 400_000):
        target = time.perf_counter_ns() + ahead_ns
        _sleep_until(target)
        assert time.perf_counter_ns() >= target
