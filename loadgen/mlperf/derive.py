"""From a LoadGen `TestSettings` and the QSL's sizes to LoadGen's effective settings and our run.

`effective` mirrors LoadGen's `TestSettingsInternal` (what its detail log calls
`effective_*`): the scenario's target rate and percentile, MultiStream's query
size, Offline's one query of max(min_query_count, 1.1 x duration x expected QPS)
samples, the performance and accuracy sample counts (QSL's unless overridden),
and equal issue (`sample_concatenate_permutation`: SingleStream's query count
rounded up to a multiple of the performance sample count). `plan_for` turns
those into our settings and run plan, so both sides count the same queries.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from loadgen.errors import SettingsError
from loadgen.mlperf.testsettings import TestSettings
from loadgen.mlperf.types import TestMode, TestScenario
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import TestSettings as OurSettings
from loadgen.plan.settings import settings_from_mapping

__all__ = ["DRAIN_TIMEOUT_S", "effective", "plan_for"]

DRAIN_TIMEOUT_S = 600.0
"""How long the drop-in waits after the last issue for a harness's completions (LoadGen: forever)."""


def effective(s: TestSettings, total: int, performance_count: int) -> dict[str, Any]:
    """LoadGen's effective settings, by the names of its detail log (without the prefix)."""
    scenario = TestScenario(s.scenario)
    samples_per_query, target_latency_ns, max_async = 1, 0, 1
    min_query_count, target_duration_ms = s.min_query_count, s.min_duration_ms
    if scenario is TestScenario.SingleStream:
        target_qps = 1e9 / s.single_stream_expected_latency_ns
        percentile = s.single_stream_target_latency_percentile
    elif scenario is TestScenario.MultiStream:
        target_qps = 1e9 / s.multi_stream_expected_latency_ns
        percentile = s.multi_stream_target_latency_percentile
        samples_per_query = s.multi_stream_samples_per_query
    elif scenario is TestScenario.Server:
        target_qps = s.server_target_qps
        target_latency_ns = s.server_target_latency_ns
        percentile = s.server_target_latency_percentile
        max_async = s.server_max_async_queries
    else:
        target_qps, percentile = s.offline_expected_qps, 0.99
    performance_sample_count = s.performance_sample_count_override or performance_count
    if scenario is TestScenario.Offline:
        target_samples = int(1.1 * (target_duration_ms / 1e3) * target_qps)
        samples_per_query = performance_sample_count if s.performance_issue_unique else max(
            min_query_count, target_samples)
        min_query_count, target_duration_ms = 1, 0
    if s.sample_concatenate_permutation and scenario is TestScenario.SingleStream:
        expected = int(2.0 * (target_duration_ms / 1e3) * target_qps)
        min_query_count = max(min_query_count, expected)
        min_query_count += performance_count - min_query_count % performance_count
    return {
        "scenario": scenario.name, "test_mode": TestMode(s.mode).name,
        "samples_per_query": samples_per_query, "target_qps": target_qps,
        "target_latency_ns": target_latency_ns, "target_latency_percentile": percentile,
        "max_async_queries": max_async, "target_duration_ms": target_duration_ms,
        "min_duration_ms": s.min_duration_ms, "max_duration_ms": s.max_duration_ms,
        "min_query_count": min_query_count, "max_query_count": s.max_query_count,
        "min_sample_count": min_query_count * samples_per_query,
        "qsl_rng_seed": s.qsl_rng_seed, "sample_index_rng_seed": s.sample_index_rng_seed,
        "schedule_rng_seed": s.schedule_rng_seed,
        "accuracy_log_rng_seed": s.accuracy_log_rng_seed,
        "accuracy_log_probability": s.accuracy_log_probability,
        "accuracy_log_sampling_target": s.accuracy_log_sampling_target,
        "print_timestamps": s.print_timestamps,
        "performance_issue_unique": s.performance_issue_unique,
        "performance_issue_same": s.performance_issue_same,
        "performance_issue_same_index": s.performance_issue_same_index,
        "performance_sample_count": performance_sample_count,
        "accuracy_sample_count": s.accuracy_sample_count_override or total,
        "sample_concatenate_permutation": s.sample_concatenate_permutation,
        "use_token_latencies": s.use_token_latencies,
        "ttft_latency": s.ttft_latency, "tpot_latency": s.tpot_latency,
    }


def _token_keys(s: TestSettings) -> dict[str, Any]:
    """The token-latency targets, by our settings' names (present only when asked for).

    Our settings know these keys once the token collector is in; before, token
    targets are not judged and the keys are left out.
    """
    if not s.use_token_latencies:
        return {}
    known = {f.name for f in dataclasses.fields(OurSettings)}
    keys = {"use_token_latencies": True, "ttft_latency_ms": s.ttft_latency / 1e6,
            "tpot_latency_ms": s.tpot_latency / 1e6}
    return {k: v for k, v in keys.items() if k in known}


def plan_for(s: TestSettings, total: int, performance_count: int, *, accuracy: bool) -> RunPlan:
    """Our run plan for one LoadGen test (one mode: accuracy or performance)."""
    e = effective(s, total, performance_count)
    if e["performance_sample_count"] > total:
        raise SettingsError([(f"performance_sample_count_override: "
                             f"{e['performance_sample_count']} is more than the QSL's "
                             f"{total} samples")])
    scenario = TestScenario(s.scenario)
    values: dict[str, Any] = {
        "scenario": scenario.name, "mode": "accuracy" if accuracy else "performance",
        "arrival": "poisson", "warmup_s": 0.0,
        "target_latency_percentile": e["target_latency_percentile"] * 100,
        "min_duration_s": s.min_duration_ms / 1e3,
        "max_duration_s": s.max_duration_ms / 1e3,
        "min_query_count": e["min_query_count"], "max_query_count": s.max_query_count,
        "samples_per_query": e["samples_per_query"] if scenario is TestScenario.MultiStream
        else 1,
        "total_sample_count": e["accuracy_sample_count"],
        "performance_sample_count": e["performance_sample_count"],
        "qsl_rng_seed": s.qsl_rng_seed, "sample_index_rng_seed": s.sample_index_rng_seed,
        "schedule_rng_seed": s.schedule_rng_seed, "drain_timeout_s": DRAIN_TIMEOUT_S,
        "concurrency": 1,
        "energy": "off",  # LoadGen meters none (MLPerf's power runs use their own PTD)
    } | _token_keys(s)
    if scenario is TestScenario.Offline:
        if accuracy:  # one query per loadable set, as LoadGen issues them
            values["samples_per_query"] = e["performance_sample_count"]
        values["target_qps"] = max(e["target_qps"], 1e-9)
    if scenario is TestScenario.Server:
        values["target_qps"] = e["target_qps"]
        # token mode judges TTFT and TPOT, not the query latency (as LoadGen)
        values["target_latency_ms"] = 0.0 if s.use_token_latencies else \
            e["target_latency_ns"] / 1e6
        # LoadGen does not judge its own issue lag; a harness a whole SLO behind is, here
        values["max_issue_lag_ms"] = max(e["target_latency_ns"] / 1e6, 2.0)
    if not accuracy:
        values |= _equal_issue(s, scenario, e)
    if values["max_query_count"] and values["max_query_count"] < values["min_query_count"]:
        values["max_query_count"] = values["min_query_count"]
    plan = RunPlan.of(settings_from_mapping(values))
    if scenario is TestScenario.Offline and not accuracy:
        count = e["samples_per_query"]
        if s.sample_concatenate_permutation:  # padded to whole permutations of the loaded set
            count += -count % e["performance_sample_count"]
        plan = dataclasses.replace(plan, offline_sample_count=count)
    return plan


def _equal_issue(s: TestSettings, scenario: TestScenario, e: dict[str, Any]) -> dict[str, Any]:
    """LoadGen's equal-issue rules as our settings (performance runs).

    `sample_concatenate_permutation`: samples in whole permutations of the loaded
    set, the query count padded to a multiple of it. `performance_issue_unique`:
    each loaded sample once (performance_sample_count / samples_per_query queries).
    """
    loaded = e["performance_sample_count"]
    if s.performance_issue_unique and scenario is not TestScenario.Offline:
        queries = max(loaded // e["samples_per_query"], 1)
        return {"equal_issue": True, "min_query_count": queries, "max_query_count": queries,
                "min_duration_s": 0.0}
    if s.sample_concatenate_permutation:
        queries = e["min_query_count"]
        return {"equal_issue": True,
                "min_query_count": queries + (-queries % loaded if scenario is not
                                              TestScenario.Offline else 0)}
    return {"equal_issue": s.performance_issue_unique}
