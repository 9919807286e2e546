"""mlperf_log_detail.txt: `:::MLLOG {json}` lines with the keys LoadGen writes and the checker reads.

The `requested_*` keys are the harness's TestSettings (only with the drop-in);
`effective_*` LoadGen's derived settings; then the generated queries, the
validity parts, the early-stopping text and the `result_*` figures of the
scenario, in LoadGen's order.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
from typing import Any

from loadgen.mlperf.figures import (
    PERCENTILES,
    LogRun,
    checks,
    estimate,
    latencies,
    query_early_stop,
    reasons,
    token_early_stops,
    valid,
)
from loadgen.report.result import RunResult

__all__ = ["VERSION", "detail_entries", "detail_text"]

VERSION = "loadgen drop-in for mlperf_loadgen 6.0"

_REQUESTED_BY_SCENARIO = {
    "SingleStream": ("single_stream_expected_latency_ns",
                     "single_stream_target_latency_percentile"),
    "MultiStream": ("multi_stream_expected_latency_ns", "multi_stream_target_latency_percentile",
                    "multi_stream_samples_per_query"),
    "Server": ("server_target_qps", "server_target_latency_ns",
               "server_target_latency_percentile", "server_coalesce_queries",
               "server_find_peak_qps_decimals_of_precision",
               "server_find_peak_qps_boundary_step_size", "server_max_async_queries",
               "server_num_issue_query_threads"),
    "Offline": ("offline_expected_qps",),
}
_REQUESTED_COMMON = (
    "min_duration_ms", "max_duration_ms", "min_query_count", "max_query_count", "qsl_rng_seed",
    "sample_index_rng_seed", "schedule_rng_seed", "accuracy_log_rng_seed",
    "accuracy_log_probability", "accuracy_log_sampling_target", "print_timestamps",
    "performance_issue_unique", "performance_issue_same", "performance_issue_same_index",
    "performance_sample_count_override", "accuracy_sample_count_override",
    "sample_concatenate_permutation")
_EFFECTIVE = (
    "scenario", "test_mode", "samples_per_query", "target_qps", "target_latency_ns",
    "target_latency_percentile", "max_async_queries", "target_duration_ms", "min_duration_ms",
    "max_duration_ms", "min_query_count", "max_query_count", "min_sample_count", "qsl_rng_seed",
    "sample_index_rng_seed", "schedule_rng_seed", "accuracy_log_rng_seed",
    "accuracy_log_probability", "accuracy_log_sampling_target", "print_timestamps",
    "performance_issue_unique", "performance_issue_same", "performance_issue_same_index",
    "performance_sample_count", "accuracy_sample_count", "sample_concatenate_permutation")


def detail_text(run: LogRun) -> str:
    """The whole detail file."""
    return "".join(_mllog(key, value) for key, value in detail_entries(run))


def _mllog(key: str, value: Any) -> str:
    entry = {"key": key, "value": value, "time_ms": time.perf_counter_ns() / 1e6,
             "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME",
             "metadata": {"is_error": False, "is_warning": False, "file": "loadgen.mlperf",
                          "line_no": 0, "pid": os.getpid(), "tid": threading.get_ident()}}
    return ":::MLLOG " + json.dumps(entry) + "\n"


def _plain(value: Any) -> Any:
    return getattr(value, "name", value)


def detail_entries(run: LogRun) -> list[tuple[str, Any]]:
    """The detail log's (key, value) pairs, in LoadGen's order."""
    now = datetime.datetime.now(datetime.UTC)
    out: list[tuple[str, Any]] = [
        ("loadgen_version", VERSION), ("test_datetime", now.strftime("%Y-%m-%dT%H:%M:%SZ")),
        ("sut_name", run.sut_name), ("qsl_name", run.qsl_name),
        ("qsl_reported_total_count", run.total),
        ("qsl_reported_performance_count", run.performance_count)]
    if run.requested:
        out += [("requested_scenario", run.scenario), ("requested_test_mode", run.mode)]
        out += [(f"requested_{k}", _plain(run.requested[k]))
                for k in _REQUESTED_BY_SCENARIO[run.scenario] + _REQUESTED_COMMON]
        if run.requested.get("use_token_latencies"):
            out += [("requested_use_token_latencies", True),
                    ("requested_server_ttft_latency", run.requested["ttft_latency"]),
                    ("requested_server_tpot_latency", run.requested["tpot_latency"])]
    out += [(f"effective_{k}", run.effective[k]) for k in _EFFECTIVE]
    out += [("generic_message", f"Starting {run.mode} mode"), ("loaded_qsl_set", list(run.loaded))]
    if run.result is None:
        return out
    stats = run.result.stats
    out += [("generated_query_count", stats.queries),
            ("generated_samples_per_query", run.effective["samples_per_query"]),
            ("generated_query_duration", round(stats.duration_s * 1e9))]
    ended = datetime.datetime.now()
    stamp = "%m-%d-%Y %H:%M:%S.%f"
    out += [("power_begin", (ended - datetime.timedelta(seconds=stats.duration_s))
             .strftime(stamp)[:-3]), ("power_end", ended.strftime(stamp)[:-3])]
    return out + _validity(run) + _results(run, run.result)


def _validity(run: LogRun) -> list[tuple[str, Any]]:
    c = checks(run)
    out: list[tuple[str, Any]] = [("result_validity", "VALID" if valid(run) else "INVALID")]
    if run.scenario == "Server":
        out.append(("result_perf_constraints_met", c["perf_constraints"]))
    out += [("result_min_duration_met", c["min_duration"]),
            ("result_min_queries_met", c["min_queries"]),
            ("early_stopping_met", c["early_stopping"])]
    if not valid(run):
        out.append(("result_invalid_reason", " ".join(reasons(run))))
    if run.tokens:
        ttft, tpot = token_early_stops(run)
        return out + [("early_stopping_ttft_result", " ".join(ttft.lines)),
                      ("early_stopping_tpot_result", " ".join(tpot.lines))]
    return out + [("early_stopping_result", " ".join(query_early_stop(run).lines))]


def _results(run: LogRun, result: RunResult) -> list[tuple[str, Any]]:
    stats = result.stats
    out: list[tuple[str, Any]] = [("result_query_count", stats.queries)]
    mean = stats.query_latency_ns.mean
    if run.scenario == "Server":
        out += [("result_overlatency_query_count", stats.overlatency),
                ("result_scheduled_samples_per_sec", stats.qps_scheduled),
                ("result_completed_samples_per_sec", stats.samples_per_s)]
    elif run.scenario == "Offline":
        out.append(("result_samples_per_second", stats.samples_per_s))
    elif run.scenario == "SingleStream":
        name = "ttft_ns" if run.tokens else "query_latency_ns"
        out += [("result_qps_with_loadgen_overhead", stats.qps_completed),
                ("result_qps_without_loadgen_overhead", 1e9 / mean if mean else 0.0),
                ("early_stopping_latency_ss", estimate(run, name, run.percent)),
                ("early_stopping_latency_ms", estimate(run, name, 99.0))]
    else:
        query = latencies(run, "query_latency_ns")
        out += [("result_min_query_latency_ns", query["min"]),
                ("result_max_query_latency_ns", query["max"]),
                ("result_mean_query_latency_ns", query["mean"])]
        out += [(f"result_{p:.2f}_percentile_per_query_latency_ns", query[f"{p:.2f}"])
                for p in PERCENTILES]
        out.append(("early_stopping_latency_ms", query_early_stop(run).estimate))
    lat = latencies(run, "query_latency_ns" if run.scenario == "Offline" else "latency_ns")
    out += [("result_min_latency_ns", lat["min"]), ("result_max_latency_ns", lat["max"]),
            ("result_mean_latency_ns", lat["mean"])]
    out += [(f"result_{p:.2f}_percentile_latency_ns", lat[f"{p:.2f}"]) for p in PERCENTILES]
    if run.tokens:
        out += _token_results(run, result)
    return out + [("num_errors", stats.errors)]


def _token_results(run: LogRun, result: RunResult) -> list[tuple[str, Any]]:
    stats = result.stats
    tokens = run.token_counters.get("output_total", 0)
    per_s = tokens / stats.duration_s if stats.duration_s else 0.0
    if run.scenario == "Offline":  # LoadGen reports only the token rate there
        return [("result_tokens_per_second", per_s)]
    ttft, tpot = latencies(run, "ttft_ns"), latencies(run, "tpot_ns")
    out: list[tuple[str, Any]] = [
        ("result_first_token_min_latency_ns", ttft["min"]),
        ("result_first_token_max_latency_ns", ttft["max"]),
        ("result_first_token_mean_latency_ns", ttft["mean"])]
    out += [(f"result_first_token_{p:.2f}_percentile_latency_ns", ttft[f"{p:.2f}"])
            for p in PERCENTILES]
    out += [("result_token_throughput_with_loadgen_overhead", per_s),
            ("result_token_throughput", per_s)]
    out += [(f"result_time_per_output_token_{p:.2f}_percentile_ns", tpot[f"{p:.2f}"])
            for p in PERCENTILES]
    out += [("result_time_to_output_token_min", tpot["min"]),
            ("result_time_to_output_token_max", tpot["max"]),
            ("result_time_to_output_token_mean", tpot["mean"]),
            ("result_completed_tokens_per_second", per_s)]
    return out
