"""Each verdict rule on hand-made figures: no engine, no clock."""

import dataclasses

from loadgen.plan.settings import load_settings
from loadgen.judge.stats import RunStats
from loadgen.judge.verdict import evaluate, headline

SUMMARY = {"p50": 1_000_000, "p90": 2_000_000, "p95": 2_500_000, "p99": 4_000_000,
           "p999": 5_000_000, "mean": 1_200_000, "min": 500_000, "max": 6_000_000, "count": 10_000}
LAG = dict(SUMMARY, p50=1_000, p99=5_000, mean=1_500)


def _stats(**changes):
    base = RunStats(
        queries=20_000, samples=20_000, errors=0, errors_by_kind={}, unfinished=0, late=0,
        duration_s=700.0, qps_scheduled=28.6, qps_completed=28.6, samples_per_s=28.6,
        goodput_qps=28.6, overlatency=0, latency_ns=SUMMARY, service_latency_ns=SUMMARY,
        issue_lag_ns=LAG, query_latency_ns=SUMMARY, components_ns={}, batch_sizes={},
        early_stopping={"passes": True, "overlatency": 0, "queries": 20_000,
                        "target_latency_ns": 10_000_000, "max_overlatency_allowed": 160,
                        "min_queries_needed": 459},
        interrupted=False, out_of_range=0, timeline=[], steps=[], histograms={})
    return dataclasses.replace(base, **changes)


SERVER = load_settings(None, ["target_latency_ms=10", "min_query_count=10000", "warmup_s=1"])


def test_a_clean_run_is_valid_without_warnings():
    v = evaluate(SERVER, _stats())
    assert v.valid and v.reasons == () and v.warnings == ()


def test_each_rule_gives_its_own_reason():
    cases = {
        "interrupted": _stats(interrupted=True),
        "min_duration_s": _stats(duration_s=10.0),
        "min_query_count": _stats(queries=5000),
        "failed": _stats(errors=3, errors_by_kind={"http_503": 3}),
        "early stopping": _stats(early_stopping=dict(_stats().early_stopping, passes=False,
                                                     overlatency=400)),
        "fell behind": _stats(issue_lag_ns=dict(LAG, p99=3_000_000)),
    }
    for needle, stats in cases.items():
        v = evaluate(SERVER, stats)
        assert not v.valid and len(v.reasons) == 1 and needle in v.reasons[0], (needle, v)


def test_warnings_for_the_usual_pitfalls():
    closed = load_settings(None, ["target_latency_ms=10", "arrival='closed'", "preset='dev'"])
    v = evaluate(closed, _stats(queries=300, query_latency_ns=dict(SUMMARY, mean=3_000_000)))
    text = " ".join(v.warnings)
    for needle in ("not a compliant", "no warm-up", "poorly resolved", "over twice the median",
                   "closed-loop"):
        assert needle in text, needle


def test_headline_per_scenario():
    assert headline(SERVER, _stats())[0] == "scheduled_qps"
    offline = load_settings(None, ["scenario='Offline'"])
    assert headline(offline, _stats()) == ("samples_per_s", 28.6)
    single = load_settings(None, ["scenario='SingleStream'"])
    es = {"estimate_ns": 2_100_000}
    assert headline(single, _stats(early_stopping=es)) == ("early_stopping_p90_latency_ns",
                                                            2_100_000.0)
