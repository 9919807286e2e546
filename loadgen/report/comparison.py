"""The pieces of a comparison's report (compare.json, written by `loadgen compare --out`):
its headline, its metric rows and its charts, A and B side by side."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadgen.record.histograms import decode, merge
from loadgen.report import charts
from loadgen.report.charts import Chart
from loadgen.report.result import RunResult, read_result

__all__ = ["comparison_charts", "comparison_headline", "comparison_rows", "diff_chart"]


def _results(doc: Mapping[str, Any], side: str) -> list[RunResult]:
    return [read_result(Path(p)) for p in doc.get(f"{side}_results", [])]


def comparison_headline(doc: Mapping[str, Any]) -> str:
    """'B vs A: latency_p99_ns -12.0%, ... beyond the noise' (or that nothing is)."""
    beyond = [m for m in doc["metrics"] if not m["noise"] and m["method"] != "none"]
    moved = ", ".join(f"{m['metric']} {m['rel']:+.1%}" if m["rel"] is not None
                      else m["metric"] for m in beyond)
    text = (f"B vs A: {moved} beyond the noise" if beyond
            else "B vs A: no difference beyond the noise")
    return text + ("; CONSTRUCT MISMATCH" if doc["mismatch"] else "")


def comparison_rows(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per metric: A, B, B-A, relative change, its 95% interval and the verdict."""
    rows = []
    for m in doc["metrics"]:
        verdict = ("no interval" if m["method"] == "none" else "inside noise" if m["noise"]
                   else "B higher" if m["diff"] > 0 else "B lower")
        rows.append({"metric": m["metric"], "A": m["a"], "B": m["b"], "B-A": m["diff"],
                     "rel": None if m["rel"] is None else f"{m['rel']:+.2%}",
                     "CI low": m["low"], "CI high": m["high"], "method": m["method"],
                     "verdict": verdict})
    return rows


def diff_chart(doc: Mapping[str, Any]) -> Chart:
    """B / A - 1 per metric (%), with its 95% interval as an error bar."""
    ms = [m for m in doc["metrics"] if m["a"]]
    rel = [100 * m["diff"] / m["a"] for m in ms]
    data = [{"type": "bar", "name": "B / A - 1", "x": [m["metric"] for m in ms], "y": rel,
             "marker": {"color": ["#888" if m["noise"] else "#1f77b4" for m in ms]},
             "error_y": {"type": "data", "symmetric": False,
                         "array": [100 * m["high"] / m["a"] - r for m, r in zip(ms, rel,
                                                                                  strict=True)],
                         "arrayminus": [r - 100 * m["low"] / m["a"]
                                        for m, r in zip(ms, rel, strict=True)]}}]
    layout = charts.axes_layout("", "B vs A (%); grey = inside the noise")
    return Chart("B against A, per metric, with 95% intervals", data, layout)


def comparison_charts(doc: Mapping[str, Any], slo_ns: float | None) -> list[Chart]:
    """The difference chart, then A's and B's latency spectra and p99 over time, overlaid."""
    out = [diff_chart(doc)]
    sides = {name: _results(doc, name) for name in ("a", "b")}
    hists = {f"{name.upper()} {doc[name]}": merge(decode(r.stats.histograms["query_latency_ns"])
                                                  for r in results)
             for name, results in sides.items()
             if results and all("query_latency_ns" in r.stats.histograms for r in results)}
    if hists:
        out.append(charts.spectrum_chart(hists, slo_ns))
    timelines = {name.upper(): results[0].stats.timeline for name, results in sides.items()
                 if results and results[0].stats.timeline}
    if timelines:
        out.append(charts.p99_timelines_chart(timelines, slo_ns))
    return out
