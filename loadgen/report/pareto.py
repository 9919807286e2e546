"""The throughput/interactivity Pareto chart of a token sweep or find-peak, and pareto.csv.

One point per sweep point (the median over its launches) or per find-peak probe: x is the
output tokens/s one user sees (the median request's output tokens/s), y the output tokens/s
of the whole run, per GPU when the endpoint said how many GPUs serve it (`endpoint.gpu.count`,
with `endpoint_probe`). A point is VALID when every launch was; the frontier joins the
VALID points no other VALID point beats on both axes. Reads result.json files only
(`read_result`: the typed token figures).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.errors import ResultError
from loadgen.report.charts import Chart, axes_layout
from loadgen.report.peakdoc import PeakDocument
from loadgen.report.result import RESULT_FILE, read_result
from loadgen.report.sweepdoc import SweepDocument

__all__ = ["PARETO_COLUMNS", "PARETO_FILE", "pareto_chart", "pareto_rows"]

PARETO_FILE = "pareto.csv"
PARETO_COLUMNS = ("point", "tokens_per_s_per_user", "tokens_per_s", "gpus",
                  "tokens_per_s_per_gpu", "valid", "frontier")


def _figures(run_dir: Path) -> tuple[float, float, int | None] | None:
    """(per-user tokens/s, tokens/s, GPUs) of a token run; None for another kind of run."""
    try:
        result = read_result(run_dir / RESULT_FILE)
    except ResultError:
        return None
    ts = result.stats.token_stats
    if ts is None or not ts.tokens.requests:
        return None
    gpu = (result.endpoint or {}).get("gpu") or {}
    count = gpu.get("count") if isinstance(gpu.get("count"), int) and gpu["count"] > 0 else None
    tokens = ts.tokens
    return float(tokens.output_per_s_per_request.p50), float(tokens.output_per_s), count


def _row(label: str, dirs: Sequence[Path], valid: bool) -> dict[str, Any] | None:
    figures = [f for d in dirs if (f := _figures(d)) is not None]
    if not figures:
        return None
    user = statistics.median(f[0] for f in figures)
    total = statistics.median(f[1] for f in figures)
    gpus = figures[0][2]
    return {"point": label, "tokens_per_s_per_user": user, "tokens_per_s": total,
            "gpus": gpus, "tokens_per_s_per_gpu": None if gpus is None else total / gpus,
            "valid": valid, "frontier": False}


def _mark_frontier(rows: list[dict[str, Any]]) -> None:
    y = "tokens_per_s_per_gpu" if all(r["gpus"] for r in rows) else "tokens_per_s"
    valid = [r for r in rows if r["valid"]]
    for r in valid:
        r["frontier"] = not any(
            o is not r and o["tokens_per_s_per_user"] >= r["tokens_per_s_per_user"]
            and o[y] >= r[y] and (o["tokens_per_s_per_user"], o[y])
            != (r["tokens_per_s_per_user"], r[y]) for o in valid)


def pareto_rows(doc: SweepDocument | PeakDocument, root: Path) -> list[dict[str, Any]]:
    """The chart's points (`PARETO_COLUMNS`) of a sweep or find-peak; none without tokens."""
    rows: list[dict[str, Any] | None] = []
    if isinstance(doc, SweepDocument):
        for p in doc.points:
            label = ", ".join(f"{k}={v}" for k, v in p.values.items())
            rows.append(_row(label, [root / d for d in p.launch_dirs],
                             p.valid_launches == p.launches))
    else:
        rows += [_row(f"{p.target_qps:g} QPS", [root / p.dir], p.valid) for p in doc.probes]
    kept = [r for r in rows if r is not None]
    _mark_frontier(kept)
    return kept


def pareto_chart(rows: Sequence[Mapping[str, Any]]) -> Chart:
    """Output tokens/s per user (x) against output tokens/s in all or per GPU (y)."""
    per_gpu = all(r["gpus"] for r in rows)
    y = "tokens_per_s_per_gpu" if per_gpu else "tokens_per_s"
    data: list[dict[str, Any]] = []
    for valid, name, symbol in ((True, "VALID", "circle"), (False, "INVALID", "x")):
        pts = [r for r in rows if r["valid"] is valid]
        if pts:
            data.append({"type": "scatter", "mode": "markers+text", "name": name,
                         "x": [r["tokens_per_s_per_user"] for r in pts],
                         "y": [r[y] for r in pts], "text": [r["point"] for r in pts],
                         "textposition": "top center", "marker": {"symbol": symbol,
                                                                  "size": 10}})
    front = sorted((r for r in rows if r["frontier"]), key=lambda r: r["tokens_per_s_per_user"])
    if len(front) > 1:
        data.append({"type": "scatter", "mode": "lines", "name": "frontier",
                     "x": [r["tokens_per_s_per_user"] for r in front],
                     "y": [r[y] for r in front], "line": {"dash": "dot"}})
    ytitle = "output tokens/s per GPU" if per_gpu else "output tokens/s (all)"
    return Chart("Throughput vs interactivity (Pareto)", data,
                 axes_layout("output tokens/s per user (median request)", ytitle))
