"""One row per run, read at a glance: the same figures in `summary.csv`, the sweep and
find-peak tables on the terminal and in the report, and `sweep.csv`.

Columns (token columns only for token runs; durations in ms in files, formatted for people
on screen): offered_qps, achieved_qps, p50_ms, p99_ms, ttft_p50_ms, ttft_p99_ms,
tpot_p50_ms, tpot_p99_ms, itl_p50_ms, itl_p99_ms, output_tokens_per_s, goodput_qps (queries
within the latency SLO per second), token_goodput_rps (requests meeting every token SLO per
second), errors, sut_rss_peak_mb and sut_gpu_peak_mb (the SUT's peak memory, `sut_memory`;
empty where not measured), valid, reasons (reason codes, space-separated).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.plan.units import format_duration
from loadgen.report.result import RunResult
from loadgen.report.tables import write_csv

__all__ = ["SUMMARY_CSV", "TOKEN_COLUMNS", "point_row", "render_table", "run_row",
           "write_summary_csv"]

SUMMARY_CSV = "summary.csv"
TOKEN_COLUMNS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms", "itl_p50_ms",
                 "itl_p99_ms", "output_tokens_per_s", "token_goodput_rps")
_TOKEN_LATENCIES = {"ttft": "ttft_ns", "tpot": "tpot_ns", "itl": "itl_ns"}


def _ms(ns: float) -> float:
    return round(ns / 1e6, 6)


def run_row(result: RunResult) -> dict[str, Any]:
    """The at-a-glance figures of one run (a flat dict, CSV-ready)."""
    r = result.stats
    row: dict[str, Any] = {
        "scenario": str(result.settings.scenario),
        "offered_qps": round(r.qps_scheduled, 3), "achieved_qps": round(r.qps_completed, 3),
        "samples_per_s": round(r.samples_per_s, 3),
        "p50_ms": _ms(r.query_latency_ns.p50), "p99_ms": _ms(r.query_latency_ns.p99),
    }
    ts = r.token_stats
    if ts is not None:
        for name, key in _TOKEN_LATENCIES.items():
            summary = ts.latency(key).summary
            row[f"{name}_p50_ms"] = _ms(summary.p50)
            row[f"{name}_p99_ms"] = _ms(summary.p99)
        row["output_tokens_per_s"] = round(ts.tokens.output_per_s, 3)
        row["token_goodput_rps"] = round(ts.goodput.requests_per_s, 3) \
            if ts.goodput.slos_ms else None
    row |= {"goodput_qps": round(r.goodput_qps, 3), "errors": r.errors,
            "sut_rss_peak_mb": _mb(result, "host_rss_peak_bytes"),
            "sut_gpu_peak_mb": _mb(result, "gpu_memory_peak_bytes"),
            "valid": result.valid, "reasons": " ".join(str(x.code) for x in result.verdict.reasons)}
    return row


def _mb(result: RunResult, key: str) -> float | None:
    """A `sut_memory` peak in MiB (None where not measured)."""
    value = (result.sut_memory or {}).get(key)
    return None if value is None else round(value / 2**20, 1)


def point_row(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A sweep point over its launches' rows (`run_row`): the median of each figure; VALID
    only when every launch is, with every launch's reason codes."""
    out: dict[str, Any] = {}
    for key, first in rows[0].items():
        values = [row[key] for row in rows]
        if key == "valid":
            out[key] = all(values)
        elif key == "reasons":
            out[key] = " ".join(sorted({code for v in values for code in str(v).split()}))
        elif isinstance(first, int | float) and not isinstance(first, bool) and None not in values:
            out[key] = statistics.median(values)
        else:
            out[key] = first
    return out


def write_summary_csv(out_dir: Path, result: RunResult) -> Path:
    """summary.csv beside result.json: `run_row` as one row."""
    return write_csv(out_dir / SUMMARY_CSV, [run_row(result)])


_SHOWN = (("offered_qps", "offered/s"), ("achieved_qps", "achieved/s"), ("p50_ms", "p50"),
          ("p99_ms", "p99"), ("ttft_p50_ms", "TTFT p50"), ("ttft_p99_ms", "TTFT p99"),
          ("tpot_p50_ms", "TPOT p50"), ("tpot_p99_ms", "TPOT p99"), ("itl_p50_ms", "ITL p50"),
          ("itl_p99_ms", "ITL p99"), ("output_tokens_per_s", "tokens/s"),
          ("goodput_qps", "goodput/s"), ("token_goodput_rps", "tok-SLO good/s"))


def _cell(key: str, value: Any) -> str:
    if value is None or value == "":
        return "-"
    if key.endswith("_ms"):
        return format_duration(float(value) * 1e6)
    if isinstance(value, float):
        return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def render_table(rows: Sequence[Mapping[str, Any]], varied: Sequence[str] = ()) -> str:
    """A fixed-width text table, one line per row: the `varied` values first, then the
    figures the rows have, then the verdict with its reason codes."""
    if not rows:
        return ""
    shown = [(k, title) for k, title in _SHOWN if any(row.get(k) is not None for row in rows)]
    header = [*varied, *(title for _, title in shown), "verdict"]
    body = []
    for row in rows:
        verdict = "VALID" if row.get("valid") else f"INVALID {row.get('reasons') or ''}".strip()
        body.append([*(str(row.get(k, "")) for k in varied),
                     *(_cell(k, row.get(k)) for k, _ in shown), verdict])
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    last = len(header) - 1
    lines = []
    for line in [header, *body]:
        cells = [cell.ljust(w) if i < len(varied) or i == last else cell.rjust(w)
                 for i, (cell, w) in enumerate(zip(line, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines) + "\n"
