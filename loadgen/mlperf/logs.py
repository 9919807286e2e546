"""LoadGen's four outputs: mlperf_log_summary.txt, mlperf_log_detail.txt, the accuracy log, the trace.

Written from a finished run (our `RunResult`) and what the harness bridge kept
(accuracy rows, per-sample stamps), in LoadGen's formats and keys: the detail
log is `:::MLLOG {json}` lines with the `requested_*`, `effective_*`,
`result_*` and early-stopping keys MLCommons' submission checker reads; the
accuracy log is a JSON array of {seq_id, qsl_idx, data (hex)[, token_count]};
the trace is Chrome trace-event JSON, one event per sample.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.judge import early_stopping
from loadgen.judge.verdict import ReasonCode
from loadgen.record.histograms import decode, percentile_ns
from loadgen.report.result import RunResult

__all__ = ["LogRun", "early_stopping_lines", "log_names", "summary_text", "valid", "write_logs"]

PERCENTILES = (50.0, 90.0, 95.0, 97.0, 99.0, 99.9)
VERSION = "loadgen drop-in for mlperf_loadgen 6.0"


@dataclass(slots=True)
class LogRun:
    """What the logs are written from."""

    scenario: str  # LoadGen's name: SingleStream, MultiStream, Server, Offline
    mode: str  # LoadGen's test mode name
    effective: dict[str, Any]
    requested: dict[str, Any] = field(default_factory=dict)
    result: RunResult | None = None  # the performance run; None for AccuracyOnly
    sut_name: str = "PySUT"
    qsl_name: str = "PyQSL"
    total: int = 0
    performance_count: int = 0
    loaded: Sequence[int] = ()
    accuracy: Sequence[Any] = ()  # AccuracyRow-like: seq_id, qsl_idx, data, n_tokens
    tokens: bool = False
    trace: Sequence[tuple[int, int, int, int, int]] | None = None
    trace_start_ns: int = 0


def log_names(outdir: str | Path, prefix: str = "mlperf_log_", suffix: str = "",
              with_datetime: bool = False) -> dict[str, Path]:
    """The four files' paths, named as LoadGen names them."""
    if with_datetime:
        prefix = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S") + "_" + prefix
    base = Path(outdir)
    return {kind: base / f"{prefix}{kind}{suffix}{ext}" for kind, ext in (
        ("summary", ".txt"), ("detail", ".txt"), ("accuracy", ".json"), ("trace", ".json"))}


def write_logs(run: LogRun, paths: dict[str, Path]) -> None:
    """Write summary, detail and accuracy log (and the trace when `run.trace` is given)."""
    paths["summary"].parent.mkdir(parents=True, exist_ok=True)
    paths["summary"].write_text(summary_text(run))
    paths["detail"].write_text("".join(_mllog(k, v) for k, v in detail_entries(run)))
    paths["accuracy"].write_text(accuracy_text(run.accuracy, run.tokens))
    if run.trace is not None:
        paths["trace"].write_text(trace_text(run.trace, run.trace_start_ns))


def accuracy_text(rows: Iterable[Any], tokens: bool) -> str:
    """mlperf_log_accuracy.json: one object per logged sample, in completion order."""
    items = []
    for row in rows:
        item: dict[str, Any] = {"seq_id": row.seq_id, "qsl_idx": row.qsl_idx,
                                "data": row.data.hex().upper()}
        if tokens:
            item["token_count"] = row.n_tokens
        items.append("{ " + json.dumps(item)[1:-1].replace('":', '" :') + " }")
    return "[\n" + ",\n".join(items) + ("\n" if items else "") + "]\n"


def trace_text(samples: Iterable[tuple[int, int, int, int, int]], start_ns: int) -> str:
    """Chrome trace events: each sample from its issue to its completion, in µs."""
    pid, tid = os.getpid(), threading.get_ident()
    events = [json.dumps({"name": "Sample", "ph": "X", "pid": pid, "tid": tid,
                          "ts": (issued - start_ns) / 1e3, "dur": (done - issued) / 1e3,
                          "args": {"sample_seq": seq, "query_seq": query, "sample_idx": index}})
              for seq, query, index, issued, done in samples]
    return '{"traceEvents":[\n' + ",\n".join(events) + "\n]}\n"


def _mllog(key: str, value: Any) -> str:
    entry = {"key": key, "value": value, "time_ms": time.perf_counter_ns() / 1e6 % 1e9,
             "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME",
             "metadata": {"is_error": False, "is_warning": False, "file": "loadgen.mlperf",
                          "line_no": 0, "pid": os.getpid(), "tid": threading.get_ident()}}
    return ":::MLLOG " + json.dumps(entry) + "\n"


def _hist_value(result: RunResult, name: str, p: float) -> int:
    blob = result.stats.histograms.get(name)
    return int(percentile_ns(decode(blob), p)) if blob else 0


def _latencies(result: RunResult, name: str) -> dict[str, int]:
    """min, max, mean and LoadGen's six percentiles of one of the run's histograms."""
    summary = getattr(result.stats, name)
    out = {"min": summary.min, "max": summary.max, "mean": summary.mean}
    out |= {f"{p:.2f}": _hist_value(result, name, p) for p in PERCENTILES}
    return out


def _checks(run: LogRun) -> dict[str, bool]:
    """LoadGen's validity parts, read off our verdict's reason codes.

    LoadGen also fails SingleStream and MultiStream runs too short for an
    early-stopping estimate (64 queries at p90, 662 at p99); our verdict does not.
    """
    assert run.result is not None
    codes = set(run.result.verdict.codes)
    n = run.result.stats.queries
    estimable = run.scenario not in ("SingleStream", "MultiStream") or bool(
        n and early_stopping.estimate_rank(n, run.effective["target_latency_percentile"] * 100))
    e = run.effective
    at_target = _hist_value(run.result, "latency_ns", e["target_latency_percentile"] * 100)
    return {"min_duration": ReasonCode.MIN_DURATION not in codes,
            "min_queries": not codes & {ReasonCode.MIN_QUERIES, ReasonCode.MIN_SAMPLES},
            "early_stopping": ReasonCode.EARLY_STOPPING not in codes and estimable,
            "perf_constraints": run.scenario != "Server" or at_target <= e["target_latency_ns"]}


def valid(run: LogRun) -> bool:
    """LoadGen's verdict: ours, and an early-stopping estimate where LoadGen needs one."""
    assert run.result is not None
    return run.result.valid and all(_checks(run).values())


def early_stopping_lines(run: LogRun) -> list[str]:
    """LoadGen's early-stopping recommendation, line by line (none for Offline)."""
    assert run.result is not None
    stats, percent = run.result.stats, run.effective["target_latency_percentile"] * 100
    n = stats.queries
    if run.scenario == "Server":
        over = stats.overlatency
        needed = early_stopping.min_queries(percent, over)
        if n >= needed:
            return [" * Run successful."]
        return [" * Run unsuccessful.", f" * Processed {n} queries.",
                f" * Would need to run at least {needed - n} more queries,",
                " with the run being successful if every additional",
                " query were under latency."]
    if run.scenario == "Offline":
        return []
    lines = _estimate_lines(run, n, percent)
    if run.scenario == "SingleStream" and lines[0].startswith(" * Processed"):
        more = _estimate_lines(run, n, 99.0)
        if more[0].startswith(" * Only"):
            lines += [" * Not enough queries processed for 99.0th percentile",
                      " early stopping estimate (would need to process at",
                      f" least {early_stopping.min_queries(99.0, 1)} total queries)."]
        else:
            lines.append(more[-1])
    return lines


def _estimate_lines(run: LogRun, n: int, percent: float) -> list[str]:
    assert run.result is not None
    least = early_stopping.min_queries(percent, 1)
    rank = early_stopping.estimate_rank(n, percent) if n else None
    if rank is None:
        return [f" * Only processed {n} queries.",
                f" * Need to process at least {least} queries for early stopping."]
    estimate = _hist_value(run.result, "query_latency_ns", 100.0 * rank / n)
    return [f" * Processed at least {least} queries ({n}).",
            f" * Would discard {n - rank} highest latency queries.",
            f" * Early stopping {percent:.1f}th percentile estimate: {estimate}"]


def summary_text(run: LogRun) -> str:
    """mlperf_log_summary.txt, in LoadGen's layout."""
    rule = "=" * 48
    out = [rule, "MLPerf Results Summary", rule, f"SUT name : {run.sut_name}",
           f"Scenario : {run.scenario}", f"Mode     : {run.mode}"]
    result = run.result
    if result is not None:
        out += _result_lines(run, result)
    errors = result.stats.errors if result is not None else 0
    out += ["", "No warnings encountered during test.", "",
            f"{errors} ERRORS encountered. See detailed log." if errors
            else "No errors encountered during test."]
    return "\n".join(out) + "\n"


def _result_lines(run: LogRun, result: RunResult) -> list[str]:
    e, stats, checks = run.effective, result.stats, _checks(run)
    percent = e["target_latency_percentile"] * 100
    yes = {True: "Yes", False: "NO"}
    out = []
    if run.scenario in ("SingleStream", "MultiStream"):
        out.append(f"{percent:.1f}th percentile latency (ns) : "
                   f"{_hist_value(result, 'query_latency_ns', percent)}")
    elif run.scenario == "Server":
        out.append(f"Completed samples per second    : {stats.samples_per_s:.2f}")
    else:
        out.append(f"Samples per second: {stats.samples_per_s:g}")
    out.append(f"Result is : {'VALID' if valid(run) else 'INVALID'}")
    if run.scenario == "Server":
        out.append(f"  Performance constraints satisfied : {yes[checks['perf_constraints']]}")
    out += [f"  Min duration satisfied : {yes[checks['min_duration']]}",
            f"  Min queries satisfied : {yes[checks['min_queries']]}",
            f"  Early stopping satisfied: {yes[checks['early_stopping']]}"]
    if not valid(run):
        out += ["Recommendations:"] + [f" * {r.text}" for r in result.verdict.reasons]
    lines = early_stopping_lines(run)
    if lines:
        out += ["Early Stopping Result:", *lines]
    out += ["", rule_block("Additional Stats")]
    if run.scenario == "Server":
        out.append(f"Scheduled samples per second : {stats.qps_scheduled:.2f}")
    elif run.scenario == "SingleStream":
        out += [f"QPS w/ loadgen overhead         : {stats.qps_completed:.2f}",
                (f"QPS w/o loadgen overhead        : "
                f"{1e9 / stats.query_latency_ns.mean if stats.query_latency_ns.mean else 0:.2f}"),
                ""]
    name = "query_latency_ns" if run.scenario in ("MultiStream", "Offline") else "latency_ns"
    lat = _latencies(result, name)
    if run.scenario == "MultiStream":
        out.append("Per-query latency:  ")
    out += [f"Min latency (ns)                : {lat['min']}",
            f"Max latency (ns)                : {lat['max']}",
            f"Mean latency (ns)               : {lat['mean']}"]
    out += [f"{p:.2f} percentile latency (ns)   : {lat[f'{p:.2f}']}" for p in PERCENTILES]
    out += ["", rule_block("Test Parameters Used")]
    out += [f"{key} : {_num(e[key])}" for key in (
        "samples_per_query", "target_qps")] + [
        f"target_latency (ns): {e['target_latency_ns']}",
        f"max_async_queries : {e['max_async_queries']}",
        f"min_duration (ms): {e['min_duration_ms']}",
        f"max_duration (ms): {e['max_duration_ms']}"] + [
        f"{key} : {_num(e[key])}" for key in (
            "min_query_count", "max_query_count", "qsl_rng_seed", "sample_index_rng_seed",
            "schedule_rng_seed", "accuracy_log_rng_seed", "accuracy_log_probability",
            "accuracy_log_sampling_target", "print_timestamps", "performance_issue_unique",
            "performance_issue_same", "performance_issue_same_index",
            "performance_sample_count", "accuracy_sample_count")]
    return out


def rule_block(title: str) -> str:
    """A titled block header of the summary."""
    rule = "=" * 48
    return f"{rule}\n{title}\n{rule}"


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


def _plain(value: Any) -> Any:
    return getattr(value, "name", value)


def detail_entries(run: LogRun) -> list[tuple[str, Any]]:
    """The detail log's (key, value) pairs, in LoadGen's order."""
    now = datetime.datetime.now(datetime.UTC)
    out: list[tuple[str, Any]] = [
        ("loadgen_version", VERSION),
        ("test_datetime", now.strftime("%Y-%m-%dT%H:%M:%SZ")),
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
    out += [("generic_message", f"Starting {run.mode} mode"),
            ("loaded_qsl_set", list(run.loaded))]
    result = run.result
    if result is None:
        return out
    stats = result.stats
    out += [("generated_query_count", stats.queries),
            ("generated_samples_per_query", run.effective["samples_per_query"]),
            ("generated_query_duration", round(stats.duration_s * 1e9))]
    began = datetime.datetime.now() - datetime.timedelta(seconds=stats.duration_s)
    stamp = "%m-%d-%Y %H:%M:%S.%f"
    out += [("power_begin", began.strftime(stamp)[:-3]),
            ("power_end", datetime.datetime.now().strftime(stamp)[:-3])]
    return out + _result_entries(run, result)


def _result_entries(run: LogRun, result: RunResult) -> list[tuple[str, Any]]:
    stats, checks = result.stats, _checks(run)
    out: list[tuple[str, Any]] = [("result_validity", "VALID" if valid(run) else "INVALID")]
    if run.scenario == "Server":
        out.append(("result_perf_constraints_met", checks["perf_constraints"]))
    out += [("result_min_duration_met", checks["min_duration"]),
            ("result_min_queries_met", checks["min_queries"]),
            ("early_stopping_met", checks["early_stopping"])]
    if not valid(run):
        out.append(("result_invalid_reason", " ".join(r.text for r in result.verdict.reasons)
                    or "early stopping: too few queries for an estimate"))
    lines = early_stopping_lines(run)
    if lines or run.scenario == "Offline":
        out.append(("early_stopping_result", " ".join(lines)))
    out.append(("result_query_count", stats.queries))
    if run.scenario == "Server":
        out += [("result_overlatency_query_count", stats.overlatency),
                ("result_scheduled_samples_per_sec", stats.qps_scheduled),
                ("result_completed_samples_per_sec", stats.samples_per_s)]
    elif run.scenario == "Offline":
        out.append(("result_samples_per_second", stats.samples_per_s))
    elif run.scenario == "SingleStream":
        mean = stats.query_latency_ns.mean
        out += [("result_qps_with_loadgen_overhead", stats.qps_completed),
                ("result_qps_without_loadgen_overhead", 1e9 / mean if mean else 0.0),
                ("early_stopping_latency_ss", _estimate(run, stats.queries,
                                                        run.effective["target_latency_percentile"]
                                                        * 100)),
                ("early_stopping_latency_ms", _estimate(run, stats.queries, 99.0))]
    else:
        query = _latencies(result, "query_latency_ns")
        out += [("result_min_query_latency_ns", query["min"]),
                ("result_max_query_latency_ns", query["max"]),
                ("result_mean_query_latency_ns", query["mean"])]
        out += [(f"result_{p:.2f}_percentile_per_query_latency_ns", query[f"{p:.2f}"])
                for p in PERCENTILES]
        out.append(("early_stopping_latency_ms", _estimate(
            run, stats.queries, run.effective["target_latency_percentile"] * 100)))
    name = "query_latency_ns" if run.scenario == "Offline" else "latency_ns"
    lat = _latencies(result, name)
    out += [("result_min_latency_ns", lat["min"]), ("result_max_latency_ns", lat["max"]),
            ("result_mean_latency_ns", lat["mean"])]
    out += [(f"result_{p:.2f}_percentile_latency_ns", lat[f"{p:.2f}"]) for p in PERCENTILES]
    return out + [("num_errors", stats.errors)]


def _estimate(run: LogRun, n: int, percent: float) -> int:
    """The early-stopping percentile estimate; 0 where too few queries (as LoadGen logs)."""
    assert run.result is not None
    rank = early_stopping.estimate_rank(n, percent) if n else None
    return 0 if rank is None else _hist_value(run.result, "query_latency_ns", 100.0 * rank / n)


def _num(value: Any) -> str:
    """A number as C++'s ostream prints it: flags as 0/1, floats in %g."""
    if isinstance(value, bool):
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)
