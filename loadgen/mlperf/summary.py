"""mlperf_log_summary.txt, in LoadGen's layout, from a `LogRun`."""

from __future__ import annotations

from typing import Any

from loadgen.mlperf.figures import (
    PERCENTILES,
    LogRun,
    checks,
    latencies,
    query_early_stop,
    reasons,
    token_early_stops,
    valid,
)
from loadgen.report.result import RunResult

__all__ = ["summary_text"]

_RULE = "=" * 48


def _block(title: str) -> list[str]:
    return [_RULE, title, _RULE]


def num(value: Any) -> str:
    """A number as C++'s ostream prints it: flags as 0/1, floats in %g."""
    if isinstance(value, bool):
        return str(int(value))
    return f"{value:g}" if isinstance(value, float) else str(value)


def summary_text(run: LogRun) -> str:
    """The whole summary file."""
    out = [*_block("MLPerf Results Summary"), f"SUT name : {run.sut_name}",
           f"Scenario : {run.scenario}", f"Mode     : {run.mode}"]
    result = run.result
    if result is not None:
        out += _headline(run, result) + _validity(run) + _additional(run, result) + \
            _parameters(run)
    errors = result.stats.errors if result is not None else 0
    out += ["", "No warnings encountered during test.", "",
            f"{errors} ERRORS encountered. See detailed log." if errors
            else "No errors encountered during test."]
    return "\n".join(out) + "\n"


def _headline(run: LogRun, result: RunResult) -> list[str]:
    stats, p = result.stats, run.percent
    tokens = run.token_counters.get("output_total", 0)
    per_s = (lambda n: n / stats.duration_s) if stats.duration_s else (lambda n: 0.0)
    if run.scenario in ("SingleStream", "MultiStream"):
        out = [f"{p:.1f}th percentile latency (ns) : {run.at('query_latency_ns', p)}"]
        if run.tokens:
            out.append(f"{p:.1f}th first token percentile latency (ns) : "
                       f"{run.at('ttft_ns', p)}")
        return out
    if run.scenario == "Server":
        out = [f"Completed samples per second    : {stats.samples_per_s:.2f}"]
        return out + ([f"Completed tokens per second: {per_s(tokens):.2f}"] if run.tokens else [])
    out = [f"Samples per second: {stats.samples_per_s:g}"]
    return out + ([f"Tokens per second: {per_s(tokens):g}"] if run.tokens else [])


def _validity(run: LogRun) -> list[str]:
    yes = {True: "Yes", False: "NO"}
    c = checks(run)
    out = [f"Result is : {'VALID' if valid(run) else 'INVALID'}"]
    if run.scenario == "Server":
        out.append(f"  Performance constraints satisfied : {yes[c['perf_constraints']]}")
    out += [f"  Min duration satisfied : {yes[c['min_duration']]}",
            f"  Min queries satisfied : {yes[c['min_queries']]}",
            f"  Early stopping satisfied: {yes[c['early_stopping']]}"]
    if not valid(run):
        out += ["Recommendations:"] + [f" * {text}" for text in reasons(run)]
    if run.scenario == "Offline":
        return out
    if run.tokens:
        ttft, tpot = token_early_stops(run)
        return out + ["TTFT Early Stopping Result:", *ttft.lines,
                      "TPOT Early Stopping Result:", *tpot.lines]
    return out + ["Early Stopping Result:", *query_early_stop(run).lines]


def _latency_block(lat: dict[str, int], names: tuple[str, str, str, str]) -> list[str]:
    """min/max/mean lines then the percentile lines, with LoadGen's labels."""
    low, high, mean, each = names
    return [f"{low} : {lat['min']}", f"{high} : {lat['max']}", f"{mean} : {lat['mean']}"] + [
        f"{p:.2f} {each} : {lat[f'{p:.2f}']}" for p in PERCENTILES]


def _additional(run: LogRun, result: RunResult) -> list[str]:
    stats = result.stats
    out = ["", *_block("Additional Stats")]
    mean = stats.query_latency_ns.mean
    if run.scenario == "Server":
        out.append(f"Scheduled samples per second : {stats.qps_scheduled:.2f}")
    elif run.scenario == "SingleStream":
        out += [f"QPS w/ loadgen overhead         : {stats.qps_completed:.2f}",
                f"QPS w/o loadgen overhead        : {1e9 / mean if mean else 0:.2f}", ""]
    name = "query_latency_ns" if run.scenario in ("MultiStream", "Offline") else "latency_ns"
    if run.scenario == "MultiStream":
        out.append("Per-query latency:  ")
    out += _latency_block(latencies(run, name), (
        "Min latency (ns)               ", "Max latency (ns)               ",
        "Mean latency (ns)              ", "percentile latency (ns)  "))
    if run.tokens and run.scenario != "Offline":  # Offline: the token rate alone, above
        out += [""] + _token_stats(run, result)
    return out


def _token_stats(run: LogRun, result: RunResult) -> list[str]:
    stats = result.stats
    tokens = run.token_counters.get("output_total", 0)
    busy_s = stats.query_latency_ns.mean * stats.queries / 1e9
    out = []
    if run.scenario == "SingleStream":
        out += [(f"TPS w/ loadgen overhead         : "
                f"{tokens / stats.duration_s if stats.duration_s else 0:.2f}"),
                f"TPS w/o loadgen overhead        : {tokens / busy_s if busy_s else 0:.2f}"]
    elif run.scenario == "Server":
        out.append(f"Completed tokens per second                 : "
                   f"{tokens / stats.duration_s if stats.duration_s else 0:.2f}")
    out += _latency_block(latencies(run, "ttft_ns"), (
        "Min First Token latency (ns)               ", "Max First Token latency (ns)               ",
        "Mean First Token latency (ns)              ", "percentile first token latency (ns)  "))
    return out + [""] + _latency_block(latencies(run, "tpot_ns"), (
        "Min Time per Output Token (ns)               ",
        "Max Time per Output Token (ns)               ",
        "Mean Time per Output Token (ns)              ",
        "percentile time to output token (ns)  "))


def _parameters(run: LogRun) -> list[str]:
    e = run.effective
    out = ["", *_block("Test Parameters Used"),
           f"samples_per_query : {num(e['samples_per_query'])}",
           f"target_qps : {num(e['target_qps'])}"]
    if run.tokens:
        out += [f"ttft_latency (ns): {e['ttft_latency']}", f"tpot_latency (ns): {e['tpot_latency']}"]
    else:
        out.append(f"target_latency (ns): {e['target_latency_ns']}")
    out += [f"max_async_queries : {e['max_async_queries']}",
            f"min_duration (ms): {e['min_duration_ms']}",
            f"max_duration (ms): {e['max_duration_ms']}"]
    return out + [f"{key} : {num(e[key])}" for key in (
        "min_query_count", "max_query_count", "qsl_rng_seed", "sample_index_rng_seed",
        "schedule_rng_seed", "accuracy_log_rng_seed", "accuracy_log_probability",
        "accuracy_log_sampling_target", "print_timestamps", "performance_issue_unique",
        "performance_issue_same", "performance_issue_same_index", "performance_sample_count",
        "accuracy_sample_count")]
