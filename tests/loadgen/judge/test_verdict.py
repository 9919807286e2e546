"""Each verdict rule on hand-made figures, read by its code: no engine, no clock.

A test plans real settings (`RunPlan.of`) and judges a `RunStats` built by
`_stats` (a clean run of that plan, one field changed) or, for early
stopping, summarized from a collector fed with chosen latencies.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from loadgen.judge import early_stopping
from loadgen.judge.stats import EarlyStopping, LatencySummary, RunStats, summarize
from loadgen.judge.verdict import RULES, Headline, ReasonCode, Verdict, evaluate, headline
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import IssueMode, Scenario, settings_from_mapping
from loadgen.record.collect import Collector
from loadgen.record.tally import Accuracy, RunTimes

MS = 1_000_000
QUERIES = 10_000  # a clean run's measured queries (Offline: samples come from the plan)
DURATION_S = 100.0
BASE: dict[str, Any] = {"target_qps": 100, "target_latency_ms": 10, "min_duration_s": 60,
                        "min_query_count": 1000, "warmup_s": 1}
LATENCY = LatencySummary(p50=1 * MS, p90=2 * MS, p95=2_500_000, p99=4 * MS, p999=5 * MS,
                         mean=1_200_000, min=500_000, max=6 * MS, count=QUERIES)
LAG = dataclasses.replace(LATENCY, p50=1_000, p90=2_000, p95=3_000, p99=5_000, p999=8_000,
                          mean=1_500, min=0, max=9_000)
SCENARIOS = [str(s) for s in Scenario]
E = ReasonCode
Codes = tuple[ReasonCode, ...]


def _plan(scenario: str = "Server", **values: Any) -> RunPlan:
    """The plan of validated settings: BASE (a 10 ms SLO; none outside Server) plus `values`."""
    base = BASE | ({} if scenario == "Server" else {"target_latency_ms": 0})
    return RunPlan.of(settings_from_mapping(base | {"scenario": scenario} | values))


def _early(plan: RunPlan, queries: int, overlatency: int = 0) -> EarlyStopping:
    """Early-stopping figures as `summarize` derives them for this many queries over the SLO."""
    p = plan.settings.target_latency_percentile
    figures = EarlyStopping(percentile=p, queries=queries)
    if plan.slo_ns:
        figures = dataclasses.replace(
            figures, target_latency_ns=plan.slo_ns, overlatency=overlatency,
            max_overlatency_allowed=early_stopping.max_overlatency(queries, p),
            min_queries_needed=early_stopping.min_queries(p, overlatency),
            passes=early_stopping.passes(queries, overlatency, p))
    return figures


def _stats(plan: RunPlan, **changes: Any) -> RunStats:
    """A clean run of `plan` (every rule passes), then `changes`."""
    offline = plan.issue_mode is IssueMode.OFFLINE
    queries = 1 if offline else QUERIES
    samples = plan.offline_sample_count if offline else QUERIES * plan.samples_per_query
    accuracy = Accuracy(0.99, samples) if plan.issue_mode is IssueMode.ACCURACY else None
    base = RunStats(
        queries=queries, samples=samples, errors=0, errors_by_kind={}, errors_detail={},
        unfinished=0, late=0,
        duration_s=DURATION_S, qps_scheduled=99.5, qps_completed=queries / DURATION_S,
        samples_per_s=samples / DURATION_S, goodput_qps=queries / DURATION_S, overlatency=0,
        latency_ns=LATENCY, service_latency_ns=LATENCY, issue_lag_ns=LAG,
        query_latency_ns=LATENCY, target_latency_at_ns=LATENCY.p99, components_ns={},
        batch_sizes={}, early_stopping=_early(plan, queries), interrupted=False,
        out_of_range=0, accuracy=accuracy)
    return dataclasses.replace(base, **changes)


def _codes(plan: RunPlan, stats: RunStats) -> Codes:
    verdict = evaluate(plan, stats)
    assert verdict.valid == (not verdict.reasons)  # INVALID exactly when there is a reason
    assert all(r.text for r in verdict.reasons)  # and each says what to do, for people
    return verdict.codes


# -- a clean run -----------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_clean_run_has_no_reasons(scenario: str) -> None:
    plan = _plan(scenario)
    v = evaluate(plan, _stats(plan))
    assert v == Verdict(True, (), v.warnings) and v.codes == ()


def test_a_clean_compliant_server_run_has_no_warnings_either() -> None:
    plan = _plan()
    assert evaluate(plan, _stats(plan)) == Verdict(True, (), ())


# -- one rule at a time ----------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_an_interrupted_run_is_invalid(scenario: str) -> None:
    plan = _plan(scenario)
    assert _codes(plan, _stats(plan, interrupted=True)) == (E.INTERRUPTED,)


@pytest.mark.parametrize(("duration_s", "codes"), [(59.999, (E.MIN_DURATION,)), (60.0, ()),
                                                    (0.0, (E.MIN_DURATION,))])
def test_min_duration_is_a_lower_bound_met_exactly_at_it(duration_s: float,
                                                         codes: Codes) -> None:
    plan = _plan()
    assert plan.min_duration_ns == 60 * 10**9
    assert _codes(plan, _stats(plan, duration_s=duration_s)) == codes


@pytest.mark.parametrize("scenario", ["Server", "SingleStream", "MultiStream"])
def test_min_queries_one_short_fails_and_exactly_passes(scenario: str) -> None:
    plan = _plan(scenario)
    short = plan.min_query_count - 1
    assert plan.min_query_count == 1000
    assert _codes(plan, _stats(plan, queries=short)) == (E.MIN_QUERIES,)
    assert _codes(plan, _stats(plan, queries=plan.min_query_count)) == ()


def test_offline_counts_samples_not_queries() -> None:
    plan = _plan("Offline")
    assert plan.offline_sample_count > plan.min_query_count  # ~1.1 x 100 QPS x 60 s
    short = _stats(plan, samples=plan.offline_sample_count - 1)
    assert _codes(plan, short) == (E.MIN_SAMPLES,)
    exact = _stats(plan, samples=plan.offline_sample_count)
    assert exact.queries < plan.min_query_count  # one query: min_queries is not Offline's rule
    assert _codes(plan, exact) == ()


@pytest.mark.parametrize("changes", [
    {"errors": 3, "errors_by_kind": {"http_503": 3}},
    {"errors": 2, "unfinished": 2, "errors_by_kind": {"unfinished": 2}},  # the drain ran out
    {"unfinished": 2},  # unfinished alone is enough, whatever the error count says
])
def test_any_error_or_unfinished_query_is_invalid(changes: dict[str, Any]) -> None:
    plan = _plan()
    assert _codes(plan, _stats(plan, **changes)) == (E.ERRORS,)


def test_late_completions_are_a_warning_not_a_reason() -> None:
    plan = _plan()
    v = evaluate(plan, _stats(plan, late=4))
    assert v.valid and any("4 completions arrived after" in w for w in v.warnings)


def _measured(plan: RunPlan, over: int, queries: int = QUERIES) -> RunStats:
    """Summarize a run of `queries`, one every 10 ms, the last `over` of them 1 ns over the
    SLO and the rest exactly at it (at is not over)."""
    c = Collector(plan.slo_bound_ns)
    c.started(0, 0)
    for q in range(queries):
        scheduled = q * 10 * MS
        c.issued_query(q, scheduled, scheduled + 1_000, 1, True)
        c.done(q, scheduled + plan.slo_ns + (1 if q >= queries - over else 0))
    times = RunTimes(0, 0, queries * 10 * MS, c.last_done_ns, False, 0)
    return summarize(plan, c.tally(times))


def test_early_stopping_passes_at_its_boundary_count_and_fails_one_over() -> None:
    plan = _plan()
    k = early_stopping.max_overlatency(QUERIES, 99.0)
    assert k == 77  # MLPerf: 10,000 queries at p99 may have 77 over the bound
    at = _measured(plan, k)
    assert at.overlatency == k and at.early_stopping.passes is True
    assert _codes(plan, at) == ()
    over = _measured(plan, k + 1)
    assert over.overlatency == k + 1 and over.early_stopping.passes is False
    assert _codes(plan, over) == (E.EARLY_STOPPING,)


@pytest.mark.parametrize("scenario", ["SingleStream", "MultiStream", "Offline"])
def test_early_stopping_judges_only_server(scenario: str) -> None:
    plan = _plan(scenario, target_latency_ms=10)  # an SLO, reported but not judged here
    over = early_stopping.max_overlatency(QUERIES, plan.settings.target_latency_percentile) + 1
    failing = _early(plan, QUERIES, overlatency=over)
    assert failing.passes is False
    assert _codes(plan, _stats(plan, early_stopping=failing)) == ()


def test_early_stopping_is_not_judged_in_accuracy_mode() -> None:
    plan = _plan(mode="accuracy")
    assert _codes(plan, _stats(plan, early_stopping=_early(plan, QUERIES, 500))) == ()


@pytest.mark.parametrize(("scenario", "lag_ns", "codes"), [
    ("Server", 2 * MS, ()),  # exactly max_issue_lag_ms passes
    ("Server", 2 * MS + 1, (E.ISSUE_LAG,)),
    ("Server", 50 * MS, (E.ISSUE_LAG,)),
    ("SingleStream", 50 * MS, ()),  # a closed loop has no schedule to fall behind
    ("MultiStream", 50 * MS, ()),
    ("Offline", 50 * MS, ()),
])
def test_issue_lag_is_a_server_rule_with_an_inclusive_bound(scenario: str, lag_ns: int,
                                                            codes: Codes) -> None:
    plan = _plan(scenario)
    assert plan.max_issue_lag_ns == 2 * MS
    lag = dataclasses.replace(LAG, p99=lag_ns, p999=lag_ns, max=lag_ns)
    assert _codes(plan, _stats(plan, issue_lag_ns=lag)) == codes


@pytest.mark.parametrize(("accuracy", "codes"), [
    (Accuracy(0.8999, 540), (E.ACCURACY,)),
    (Accuracy(0.9, 540), ()),  # at the target passes
    (Accuracy(1.0, 540), ()),
    (Accuracy(None, 0), (E.ACCURACY,)),  # the SUT cannot score its outputs
    (None, (E.ACCURACY,)),  # no score at all
])
def test_accuracy_against_its_target(accuracy: Accuracy | None, codes: Codes) -> None:
    plan = _plan("SingleStream", mode="accuracy", accuracy_target=0.9)
    assert plan.issue_mode is IssueMode.ACCURACY
    assert _codes(plan, _stats(plan, accuracy=accuracy, queries=5)) == codes  # no query minimum


def test_a_performance_run_is_not_judged_on_accuracy() -> None:
    plan = _plan(accuracy_target=0.9)
    assert _codes(plan, _stats(plan, accuracy=Accuracy(0.1, 540))) == ()


# -- several rules at once -------------------------------------------------------------------


def test_every_failing_rule_gives_its_code_in_rules_order() -> None:
    plan = _plan()
    stats = _stats(plan, interrupted=True, duration_s=1.0, queries=10,
                   errors=1, errors_by_kind={"timeout": 1},
                   early_stopping=_early(plan, 10, overlatency=5),
                   issue_lag_ns=dataclasses.replace(LAG, p99=9 * MS))
    codes = (E.INTERRUPTED, E.MIN_DURATION, E.MIN_QUERIES, E.ERRORS, E.EARLY_STOPPING,
             E.ISSUE_LAG)
    assert _codes(plan, stats) == codes
    assert tuple(r.code for rule in RULES if (r := rule(plan, stats)) is not None) == codes


def test_accuracy_comes_last_after_the_other_failures() -> None:
    plan = _plan("Offline", mode="accuracy", accuracy_target=0.5)
    stats = _stats(plan, interrupted=True, duration_s=1.0, errors=1,
                   errors_by_kind={"boom": 1}, accuracy=Accuracy(0.4, 10))
    assert _codes(plan, stats) == (E.INTERRUPTED, E.ERRORS, E.ACCURACY)


def test_an_accuracy_run_is_not_held_to_the_duration_minimum() -> None:
    plan = _plan("Offline", mode="accuracy", accuracy_target=0.5)  # mlperf preset: 600 s
    stats = _stats(plan, duration_s=1.0, accuracy=Accuracy(0.9, 10))
    assert _codes(plan, stats) == ()
    performance = _plan("Offline")
    assert E.MIN_DURATION in _codes(performance, _stats(performance, duration_s=1.0))


# -- warnings and the headline ---------------------------------------------------------------


def test_warnings_for_the_usual_pitfalls() -> None:
    plan = RunPlan.of(settings_from_mapping({"target_latency_ms": 10, "arrival": "closed",
                                             "preset": "dev"}))
    v = evaluate(plan, _stats(plan, queries=300,
                              query_latency_ns=dataclasses.replace(LATENCY, mean=3 * MS)))
    text = " ".join(v.warnings)
    for needle in ("not a compliant", "no warm-up", "poorly resolved", "over twice the median",
                   "closed-loop"):
        assert needle in text, needle


@pytest.mark.parametrize(("scenario", "changes", "expected"), [
    ("Server", {}, Headline("scheduled_qps", 99.5)),
    ("Offline", {"samples_per_s": 66.0}, Headline("samples_per_s", 66.0)),
    ("SingleStream", {}, Headline("p90_latency_ns", 2 * MS)),
    ("MultiStream", {}, Headline("p99_latency_ns", 4 * MS)),
])
def test_headline_per_scenario(scenario: str, changes: dict[str, Any],
                               expected: Headline) -> None:
    plan = _plan(scenario)
    assert headline(plan, _stats(plan, **changes)) == expected


@pytest.mark.parametrize(("scenario", "key"), [("SingleStream", "p90"), ("MultiStream", "p99")])
def test_stream_headlines_prefer_the_early_stopping_estimate(scenario: str, key: str) -> None:
    plan = _plan(scenario)
    es = dataclasses.replace(_early(plan, QUERIES), estimate_rank=9_000, estimate_ns=2_100_000,
                             has_estimate=True)
    assert headline(plan, _stats(plan, early_stopping=es)) == Headline(
        f"early_stopping_{key}_latency_ns", 2_100_000.0)
