"""Interactive charts of saved results, as Plotly figure specs (plain dicts).

Each `*_chart` function takes plain data (ns for latencies, QPS for rates) and returns a
`Chart`: a title, Plotly traces and a layout, which `loadgen.report.html` embeds as JSON
for the Plotly library inlined in the page. The reader hovers for values, drags to zoom,
clicks a legend entry to hide or show its series. Nothing here draws or imports Plotly:
the figures are data, so they are cheap to build and easy to test.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.judge.stats import ComponentSummary
from loadgen.record.histograms import percentile_ns

__all__ = ["Chart", "LoadPoint", "axes_layout", "batch_sizes_chart", "components_chart",
           "errors_chart", "goodput_vs_load_chart", "knee", "latency_timeline_chart", "latency_vs_load_chart",
           "p99_timelines_chart", "spectrum_chart", "throughput_chart", "token_chart",
           "turns_chart"]

_DASH = {"p50": "dot", "p90": "dashdot", "p99": "solid", "p999": "dash"}
_NINES = [(2, "50%"), (10, "90%"), (100, "99%"), (1_000, "99.9%"), (10_000, "99.99%"),
          (100_000, "99.999%")]
_SLO_COLOR = "#d62728"


@dataclass(frozen=True, slots=True)
class Chart:
    """One chart: its title, Plotly traces and layout."""

    title: str
    data: list[dict[str, Any]]
    layout: dict[str, Any]


@dataclass(frozen=True, slots=True)
class LoadPoint:
    """One offered load: latency percentiles (ns), their spread, goodput; in a group."""

    x: float
    latency: Mapping[str, float]
    completed_qps: float
    goodput_qps: float
    valid: bool
    group: str = ""
    low: Mapping[str, float] = field(default_factory=dict)
    high: Mapping[str, float] = field(default_factory=dict)


def knee(points: Sequence[LoadPoint], slo_ns: float | None) -> float | None:
    """With an SLO: the highest load whose p99 meets it and every lower load's does too.
    Without: the last load before p99 first exceeds twice its value at the lowest load."""
    ordered = sorted(points, key=lambda p: p.x)
    if not ordered:
        return None
    best = None
    base = ordered[0].latency.get("p99", 0.0)
    for p in ordered:
        p99 = p.latency.get("p99", math.inf)
        if (p99 > slo_ns) if slo_ns else (p99 > 2 * base):
            break
        best = p.x
    return best


def axes_layout(xtitle: str, ytitle: str, **extra: Any) -> dict[str, Any]:
    """A Plotly layout with titled axes, tight margins and the legend below."""
    return {"xaxis": {"title": {"text": xtitle}}, "yaxis": {"title": {"text": ytitle}},
            "margin": {"l": 60, "r": 20, "t": 30, "b": 50}, "hovermode": "closest",
            "legend": {"orientation": "h", "y": -0.25}, **extra}


def _log_axis(title: str, values: Sequence[float | None]) -> dict[str, Any]:
    """A log axis ticked at 1-2-5 steps across the values, each tick labelled in full."""
    known = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    axis: dict[str, Any] = {"title": {"text": title}, "type": "log"}
    if known:
        lo, hi = math.floor(math.log10(min(known))), math.ceil(math.log10(max(known)))
        ticks = [m * 10.0**e for e in range(lo, hi + 1) for m in (1, 2, 5)]
        axis |= {"tickvals": ticks, "ticktext": [f"{t:g}" for t in ticks]}
    return axis


def _hline(y: float, name: str, x: Sequence[float], color: str = _SLO_COLOR) -> dict[str, Any]:
    """A horizontal line as a trace of its own (so it has a legend entry and a hover value)."""
    lo, hi = (min(x), max(x)) if len(x) else (0.0, 1.0)
    return {"type": "scatter", "mode": "lines", "name": name, "x": [lo, hi], "y": [y, y],
            "line": {"color": color, "width": 1.5}}


def _ms(ns: float | None) -> float | None:
    return None if ns is None or (isinstance(ns, float) and math.isnan(ns)) else ns / 1e6


def _groups(points: Sequence[LoadPoint]) -> dict[str, list[LoadPoint]]:
    out: dict[str, list[LoadPoint]] = {}
    for p in sorted(points, key=lambda p: p.x):
        out.setdefault(p.group, []).append(p)
    return out


def _median_line(pts: Sequence[LoadPoint],
                 value: Callable[[LoadPoint], float]) -> tuple[list[float], list[float]]:
    """One value per distinct load: the median over its trials (a search repeats loads)."""
    xs = sorted({p.x for p in pts})
    return xs, [float(np.median([value(p) for p in pts if p.x == x])) for x in xs]


def _latency_ms(name: str) -> Callable[[LoadPoint], float]:
    return lambda p: float(p.latency.get(name, np.nan)) / 1e6


def latency_vs_load_chart(points: Sequence[LoadPoint], slo_ns: float | None, xlabel: str,
                          knee_x: float | None = None,
                          percentiles: Sequence[str] = ("p50", "p99")) -> Chart:
    """Latency percentiles (ms) against load: a line through each load's median, a marker per
    trial (x = INVALID) with its min-max bar, the SLO line and the knee (`knee` unless given)."""
    data: list[dict[str, Any]] = []
    for group, pts in _groups(points).items():
        for name in percentiles:
            label = f"{group} {name}".strip()
            xs, ys = _median_line(pts, _latency_ms(name))
            data.append({"type": "scatter", "mode": "lines", "name": label, "x": xs, "y": ys,
                         "legendgroup": label, "line": {"dash": _DASH.get(name, "solid")}})
            trial = {"type": "scatter", "mode": "markers", "legendgroup": label,
                     "showlegend": False, "name": f"{label} trials",
                     "x": [p.x for p in pts],
                     "y": [_ms(p.latency.get(name)) for p in pts],
                     "marker": {"symbol": ["circle" if p.valid else "x" for p in pts]},
                     "text": ["VALID" if p.valid else "INVALID" for p in pts]}
            if any(name in p.low for p in pts):
                trial["error_y"] = {
                    "type": "data", "symmetric": False,
                    "array": [max(p.high.get(name, 0) - p.latency.get(name, 0), 0) / 1e6
                              for p in pts],
                    "arrayminus": [max(p.latency.get(name, 0) - p.low.get(name, 0), 0) / 1e6
                                   for p in pts]}
            data.append(trial)
    xs = [p.x for p in points]
    if slo_ns:
        data.append(_hline(slo_ns / 1e6, f"SLO {slo_ns / 1e6:g} ms", xs))
    ys = [v for d in data for v in d["y"] if v is not None and not math.isnan(v)]
    layout = axes_layout(xlabel, "", yaxis=_log_axis("latency (ms); x = INVALID", ys))
    k = knee(points, slo_ns) if knee_x is None else knee_x
    if k is not None:
        data.append({"type": "scatter", "mode": "lines", "name": f"knee {k:.5g}",
                     "x": [k, k], "y": [min(ys, default=0.1), max(ys, default=1.0)],
                     "line": {"color": "grey", "dash": "dash", "width": 1}})
    return Chart("Latency against load", data, layout)


def goodput_vs_load_chart(points: Sequence[LoadPoint], xlabel: str, offered: bool) -> Chart:
    """Goodput and completed QPS against load (each load's median, a marker per trial);
    the y = x line when x is the offered QPS."""
    data: list[dict[str, Any]] = []
    for group, pts in _groups(points).items():
        for what, value, dash in (("goodput", lambda p: p.goodput_qps, "solid"),
                                  ("completed", lambda p: p.completed_qps, "dot")):
            xs, ys = _median_line(pts, value)
            data.append({"type": "scatter", "mode": "lines+markers", "x": xs, "y": ys,
                         "name": f"{group} {what}".strip(), "line": {"dash": dash}})
    if offered and points:
        top = max(p.x for p in points)
        data.append({"type": "scatter", "mode": "lines", "name": "offered", "x": [0, top],
                     "y": [0, top], "line": {"color": "grey", "width": 1}})
    return Chart("Goodput (within the SLO) against load", data, axes_layout(xlabel, "QPS"))


def spectrum_chart(hists: Mapping[str, Any], slo_ns: float | None,
                   title: str = "Latency by percentile", limit_name: str = "SLO") -> Chart:
    """Percentile spectrum of HDR histograms on the 1/(1-p) axis (HdrHistogram's plot)."""
    data: list[dict[str, Any]] = []
    top = 2.0
    for label, hist in hists.items():
        count = int(hist.get_total_count())
        if not count:
            continue
        tail = min(6.0, math.log10(count))  # no percentile finer than one query
        inv = np.logspace(0, tail, 200)
        pct = 100.0 * (1 - 1 / inv)
        data.append({"type": "scatter", "mode": "lines", "name": f"{label} (n={count})",
                     "x": inv.tolist(), "y": [percentile_ns(hist, p) / 1e6 for p in pct],
                     "customdata": pct.tolist(),
                     "hovertemplate": "p%{customdata:.4g}: %{y:.4g} ms<extra>%{fullData.name}"
                                      "</extra>"})
        top = max(top, 10**tail)
    if slo_ns:
        data.append(_hline(slo_ns / 1e6, f"{limit_name} {slo_ns / 1e6:g} ms", [1, top]))
    ticks = [(1, "0%")] + [(x, name) for x, name in _NINES if x <= top]
    layout = axes_layout("percentile", "ms", xaxis={
        "title": {"text": "percentile"}, "type": "log",
        "tickvals": [x for x, _ in ticks], "ticktext": [name for _, name in ticks]})
    return Chart(title, data, layout)


def _mids(windows: Sequence[Mapping[str, Any]]) -> list[float]:
    return [(float(w["start_s"]) + float(w["end_s"])) / 2 for w in windows]


def latency_timeline_chart(windows: Sequence[Mapping[str, Any]], slo_ns: float | None) -> Chart:
    """Latency percentiles per time window, with the SLO line."""
    mids = _mids(windows)
    data: list[dict[str, Any]] = []
    for name in ("p50", "p90", "p99"):
        data.append({"type": "scatter", "mode": "lines+markers", "name": name, "x": mids,
                     "y": [_ms(w.get("latency_ns", {}).get(name) or None) for w in windows],
                     "line": {"dash": _DASH[name]}})
    if slo_ns:
        data.append(_hline(slo_ns / 1e6, f"SLO {slo_ns / 1e6:g} ms", mids))
    return Chart("Latency over time", data, axes_layout("time (s)", "latency (ms)"))


def p99_timelines_chart(timelines: Mapping[str, Sequence[Mapping[str, Any]]],
                        slo_ns: float | None) -> Chart:
    """p99 per time window of several runs, one series each, with the SLO line."""
    data: list[dict[str, Any]] = []
    xs: list[float] = []
    for label, windows in timelines.items():
        mids = _mids(windows)
        xs += mids
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"{label} p99",
                     "x": mids, "y": [_ms(w.get("latency_ns", {}).get("p99") or None)
                                      for w in windows]})
    if slo_ns:
        data.append(_hline(slo_ns / 1e6, f"SLO {slo_ns / 1e6:g} ms", xs))
    return Chart("p99 over time", data, axes_layout("time (s)", "latency (ms)"))


def throughput_chart(windows: Sequence[Mapping[str, Any]], end_s: float | None = None) -> Chart:
    """Answered and good (within the SLO) queries per second, per time window. With the
    run's `end_s`, the last window counts only the time it ran (a partial window is no
    cliff), and one that ran under a tenth of its width is left out."""
    kept, width = [], []
    for w in windows:
        start, end = float(w["start_s"]), float(w["end_s"])
        ran = min(end, end_s) - start if end_s is not None else end - start
        if ran >= 0.1 * (end - start) and ran > 0:
            kept.append(w)
            width.append(ran)
    mids = [float(w["start_s"]) + dt / 2 for w, dt in zip(kept, width, strict=True)]
    data = [{"type": "scatter", "mode": "lines+markers", "name": name, "x": mids,
             "y": [int(w.get(key, 0)) / dt for w, dt in zip(kept, width, strict=True)]}
            for name, key in (("throughput", "queries"), ("goodput", "good"))]
    return Chart("Throughput and goodput over time", data, axes_layout("time (s)", "QPS"))


def errors_chart(windows: Sequence[Mapping[str, Any]]) -> Chart:
    """Failed queries per time window."""
    data = [{"type": "bar", "name": "errors", "x": _mids(windows),
             "y": [int(w.get("errors", 0)) for w in windows], "marker": {"color": _SLO_COLOR}}]
    return Chart("Errors over time", data, axes_layout("time (s)", "failed queries"))


def batch_sizes_chart(sizes: Mapping[int, int]) -> Chart:
    """How many batches of each size ran."""
    pairs = sorted((int(k), int(v)) for k, v in sizes.items())
    data = [{"type": "bar", "name": "batches", "x": [str(k) for k, _ in pairs],
             "y": [v for _, v in pairs]}]
    return Chart("Batch sizes", data, axes_layout("batch size", "batches",
                                             xaxis={"title": {"text": "batch size"},
                                                    "type": "category"}))


def components_chart(components: Mapping[str, ComponentSummary]) -> Chart:
    """Each latency component's share of the mean latency, with its mean and p99 on hover."""
    names = sorted(components)
    c = [components[n] for n in names]
    data = [{"type": "bar", "orientation": "h", "name": "share of mean latency",
             "y": names, "x": [100 * x.share for x in c],
             "customdata": [[x.latency.mean / 1e6, x.latency.p99 / 1e6] for x in c],
             "hovertemplate": "%{y}: %{x:.1f}% (mean %{customdata[0]:.3g} ms, "
                              "p99 %{customdata[1]:.3g} ms)<extra></extra>"}]
    for key in ("mean", "p99"):
        data.append({"type": "bar", "orientation": "h", "name": f"{key} (ms)", "y": names,
                     "x": [getattr(x.latency, key) / 1e6 for x in c], "xaxis": "x2",
                     "visible": "legendonly"})
    layout = axes_layout("% of mean latency", "", barmode="group",
                     xaxis2={"overlaying": "x", "side": "top", "title": {"text": "ms"}},
                     yaxis={"automargin": True})  # room for the longest component name
    return Chart("Latency components", data, layout)


def _views(summary: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A summary (p50 ... count) by view: from the schedule, and from the send where the
    summary carries that view (`from_send`)."""
    send = summary.get("from_send")
    if isinstance(send, Mapping):
        return {"from schedule": summary, "from send": send}
    return {"": summary}


def token_chart(metrics: Mapping[str, Mapping[str, Any]]) -> Chart:
    """Token latencies (TTFT, TPOT, ITL, E2E ...): p50, p90, p99 and p99.9 of each, in ms."""
    data: list[dict[str, Any]] = []
    for pct in ("p50", "p90", "p99", "p999"):
        names, values = [], []
        for metric, summary in metrics.items():
            for view, s in _views(summary).items():
                names.append(f"{metric.removesuffix('_ns')} {view}".strip())
                values.append(_ms(s.get(pct)))
        data.append({"type": "bar", "name": pct, "x": names, "y": values})
    ys = [v for d in data for v in d["y"]]
    return Chart("Token latencies", data, axes_layout("", "", barmode="group",
                                                  yaxis=_log_axis("ms", ys)))


def turns_chart(rows: Sequence[Mapping[str, Any]]) -> Chart:
    """Multi-turn sessions: TTFT and TPOT p50 and p99 (ms) by turn index (`report.turns`)."""
    x = [row["turn"] for row in rows]
    data = [{"type": "scatter", "mode": "lines+markers", "name": f"{metric} {pct}", "x": x,
             "y": [row[f"{metric} {pct} (ms)"] for row in rows],
             "line": {"dash": _DASH[pct]}}
            for metric in ("TTFT", "TPOT") for pct in ("p50", "p99")]
    ys = [v for d in data for v in d["y"]]
    return Chart("TTFT and TPOT by turn", data,
                 axes_layout("turn", "", xaxis={"title": {"text": "turn"}, "dtick": 1},
                             yaxis=_log_axis("ms", ys)))
