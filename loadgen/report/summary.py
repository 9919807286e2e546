"""summary.txt: the human reading of a result, MLPerf-like. Reads a `RunResult` only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.judge.stats import LatencySummary, RunStats
from loadgen.report.energy import energy_lines
from loadgen.report.jobsummary import job_lines
from loadgen.report.result import RunResult
from loadgen.report.rows import write_summary_csv
from loadgen.report.serversummary import server_lines
from loadgen.report.tokensummary import token_lines

__all__ = ["SUMMARY_FILE", "adjusted_line", "render_summary", "write_summary"]

SUMMARY_FILE = "summary.txt"
_RULE = "=" * 64
_ORDER = ("p50", "p90", "p95", "p99", "p999", "mean", "min", "max")


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:10.3f} ms"


def _latency_block(title: str, summary: LatencySummary) -> list[str]:
    if not summary.count:
        return []
    cells = "  ".join(f"{k}={getattr(summary, k) / 1e6:.3f}" for k in _ORDER)
    adjusted = summary.error_adjusted or {}
    same = all(v == getattr(summary, k, v) for k, v in adjusted.items())
    return [f"{title} (ms, n={summary.count}):", f"  {cells}",
            *([] if same else adjusted_line(adjusted))]


def adjusted_line(adjusted: dict[str, int | None] | None, indent: str = "  ") -> list[str]:
    """The error-adjusted percentiles (failed and unfinished as infinite), if any differ."""
    if not adjusted:
        return []
    cells = "  ".join(f"{k}={'inf' if v is None else f'{v / 1e6:.3f}'}"
                      for k, v in adjusted.items())
    return [f"{indent}error-adjusted (failed and unfinished as infinite): {cells}"]


def render_summary(result: RunResult) -> str:
    """The text of summary.txt."""
    s, r, v = result.settings, result.stats, result.verdict
    es = r.early_stopping
    lines = [_RULE, "loadgen results summary", _RULE,
             f"SUT       : {result.sut.get('sut', '?')}  {_describe_sut(result.sut)}",
             f"Scenario  : {s.scenario}   mode: {s.mode}   preset: {s.preset}",
             f"Result is : {'VALID' if v.valid else 'INVALID'}"]
    lines += _why_most_failed(r)
    lines += [f"  reason  : [{reason.code}] {reason.text}" for reason in v.reasons]
    head = result.headline
    shown = _ms(head.value).strip() if head.name.endswith("_ns") else f"{head.value:.2f}"
    lines += ["", f"Headline  : {head.name} = {shown}",
              (f"Queries   : {r.queries}  samples: {r.samples}  errors: {r.errors}"
               f"  duration: {r.duration_s:.2f} s"),
              (f"Rates     : scheduled {r.qps_scheduled:.2f} QPS, completed "
               f"{r.qps_completed:.2f} QPS, {r.samples_per_s:.2f} samples/s, "
               f"latency-SLO goodput {r.goodput_qps:.2f} QPS")]
    if s.target_latency_ms:
        lines.append(f"SLO       : p{s.target_latency_percentile:g} <= "
                     f"{s.target_latency_ms:g} ms; over SLO: {r.overlatency}")
    if es.passes is not None and (s.target_latency_ms or not s.use_token_latencies):
        lines.append(f"Early stop: {'passes' if es.passes else 'fails'} "
                     f"({es.overlatency} over, {es.max_overlatency_allowed} allowed, "
                     f"{es.min_queries_needed} queries needed)")
    if es.estimate_ns is not None:
        lines.append(f"Early stop: p{es.percentile:g} estimate (99% upper bound) "
                     f"{_ms(es.estimate_ns).strip()}")
    if r.accuracy is not None and r.accuracy.value is not None:
        lines.append(f"Accuracy  : {r.accuracy.value:.4f} "
                     f"(target {s.accuracy_target:g}, {r.accuracy.samples} samples)")
    lines += job_lines(r.job_stats)
    lines += energy_lines(result.energy)
    lines.append("")
    lines += _latency_block("Latency from schedule", r.latency_ns)
    if s.scenario == "MultiStream":
        lines += _latency_block("Query latency (slowest sample)", r.query_latency_ns)
    lines += _latency_block("Latency from send", r.service_latency_ns)
    lines += _latency_block("Issue lag", r.issue_lag_ns)
    lines += token_lines(result)
    lines += server_lines(result)
    if r.components_ns:
        lines += ["", "Components (p50 / p99 ms, share of mean end-to-end):"]
        for name, c in r.components_ns.items():
            lines.append(f"  {name:<16} {c.latency.p50 / 1e6:9.3f} {c.latency.p99 / 1e6:9.3f}  "
                         f"{100 * c.share:5.1f}%")
    lines += _steps_block(r.steps)
    if result.workers:
        w = result.workers
        lags = "  ".join(f"#{p['index']} {p['queries']}q lag p99 {p['issue_lag_ns']['p99'] / 1e6:.3f}"
                         for p in w["per_worker"])
        lines += ["", f"Load processes: {w['count']} ({w['split']}); {lags} ms"]
        lines += [_harness_cost(w)]
    if result.distributed:
        d = result.distributed
        lost = "; ".join(f"LOST #{x['index']} on {x['host']} ({x['missing']} queries missing)"
                         for x in d["lost"])
        engine = " ".join(str(x) for x in (d['engine'], d['version']) if x)
        lines += [f"Engine    : {engine} on {d['hosts']} host(s); "
                  f"clock skew bound {d['skew_bound_ns'] / 1e6:.3f} ms" + (f"; {lost}" if lost
                                                                           else "")]
    if r.batch_sizes:
        total = sum(r.batch_sizes.values())
        dist = "  ".join(f"{k}:{100 * n / total:.0f}%" for k, n in r.batch_sizes.items())
        lines += ["", f"Batch sizes: {dist}"]
    lines += _errors_block(r)
    if v.warnings:
        lines += ["", "Warnings:"] + [f"  - {w}" for w in v.warnings]
    lines.append(_RULE)
    return "\n".join(lines) + "\n"


def _harness_cost(w: dict[str, Any]) -> str:
    """What the load processes and the driver cost: CPU share and start slack of each."""
    def slack(p: dict[str, Any]) -> str:
        ns = p.get("start_slack_ns")
        return "" if ns is None else f", slack {ns / 1e6:.1f} ms"

    each = "  ".join(f"#{p['index']} cpu {p['cpu_share']:.0%}{slack(p)}" for p in w["per_worker"])
    driver = w.get("driver")
    return f"Harness   : {each}" + ("" if driver is None
                                      else f"; driver cpu {driver['cpu_share']:.0%}")


def _why_most_failed(r: RunStats) -> list[str]:
    """When most queries failed, the first lines say why: the commonest kind and its message."""
    if not r.errors_detail or r.errors < r.queries:
        return []
    kind, detail = next(iter(r.errors_detail.items()))
    said = f": {detail.messages[0]}" if detail.messages else ""
    return [(f"  cause   : most queries failed ({r.errors} of {r.errors + r.queries}); "
             f"{detail.count} as {kind}{said}")]


def _errors_block(r: RunStats) -> list[str]:
    if not r.errors_detail:
        return []
    lines = ["", "Errors (count, first distinct messages):"]
    for kind, detail in r.errors_detail.items():
        lines.append(f"  {kind:<20} {detail.count}")
        lines += [f"      {message}" for message in detail.messages]
    return lines


def _steps_block(steps: list[dict[str, Any]]) -> list[str]:
    if not steps:
        return []
    lines = ["", "Steps (s from start; QPS planned / scheduled / goodput; latency ms):"]
    for st in steps:
        lat = st["latency_ns"]
        lines.append(f"  {st['step']:>3} {st['start_s']:8.1f}-{st['end_s']:<8.1f} "
                     f"{st['target_qps']:9.1f} {st['qps_scheduled']:9.1f} {st['goodput_qps']:9.1f}"
                     f"  p50 {lat['p50'] / 1e6:.3f}  p99 {lat['p99'] / 1e6:.3f}  "
                     f"errors {st['errors']}")
    return lines


def _describe_sut(sut: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in sut.items() if k != "sut" and not isinstance(v, dict))


def write_summary(out_dir: Path, result: RunResult) -> Path:
    """Write summary.txt beside result.json, and its one-row summary.csv (`report.rows`)."""
    path = out_dir / SUMMARY_FILE
    path.write_text(render_summary(result))
    write_summary_csv(out_dir, result)
    return path
