"""Plots of saved results, drawn with matplotlib onto a given Axes; `png` renders one.

Why matplotlib rather than hand-written SVG: log axes with percentile tick labels,
error bars, legends and text layout are what it does well, and a report is read by
people. It is used only through `matplotlib.figure.Figure` with the Agg canvas (no
pyplot, no global state, no display), and imported only when a report is drawn.

Every `draw_*` function takes plain data (ns for latencies, QPS for rates), draws on
the Axes it is handed and returns nothing, so one figure can compose several plots
(see `compose`).
"""

from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

from loadgen.judge.stats import ComponentSummary
from loadgen.record.histograms import percentile_ns

__all__ = ["LoadPoint", "compose", "draw_batch_sizes", "draw_components", "draw_goodput",
           "draw_latency_vs_load", "draw_spectrum", "draw_timeline", "knee", "png"]

Draw = Callable[[Axes], None]
_PERCENTILE_STYLE = {"p50": ":", "p90": "-.", "p99": "-", "p999": "--"}
_NINES = [(2, "50%"), (10, "90%"), (100, "99%"), (1_000, "99.9%"), (10_000, "99.99%"),
          (100_000, "99.999%")]


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


def draw_latency_vs_load(ax: Axes, points: Sequence[LoadPoint], slo_ns: float | None,
                         xlabel: str, knee_x: float | None = None,
                         percentiles: Sequence[str] = ("p50", "p99")) -> None:
    """Latency percentiles (ms) against load: a line through each load's median, a marker
    per trial (x = INVALID), min-max bars, the SLO line and the knee (`knee` unless given)."""
    for i, (group, pts) in enumerate(_groups(points).items()):
        color = f"C{i}"
        xs = np.array([p.x for p in pts])
        for name in percentiles:
            ys = np.array([p.latency.get(name, np.nan) for p in pts]) / 1e6
            lo = np.array([p.low.get(name, np.nan) for p in pts]) / 1e6
            hi = np.array([p.high.get(name, np.nan) for p in pts]) / 1e6
            line_x, line_y = _median_line(pts, _latency_ms(name))
            ax.plot(line_x, line_y, _PERCENTILE_STYLE.get(name, "-"), color=color,
                    label=f"{group} {name}".strip())
            if np.isfinite(lo).any():
                ax.errorbar(xs, ys, yerr=[np.maximum(ys - lo, 0), np.maximum(hi - ys, 0)],
                            fmt="none", ecolor=color, alpha=0.6, capsize=2)
            bad = np.array([not p.valid for p in pts])
            ax.scatter(xs[~bad], ys[~bad], marker="o", s=12, color=color, zorder=3)
            ax.scatter(xs[bad], ys[bad], marker="x", color=color, zorder=3)
    if slo_ns:
        ax.axhline(slo_ns / 1e6, color="red", linewidth=1, label=f"SLO {slo_ns / 1e6:g} ms")
    k = knee(points, slo_ns) if knee_x is None else knee_x
    if k is not None:
        ax.axvline(k, color="grey", linestyle="--", linewidth=1, label=f"knee {k:.5g}")
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("latency (ms); x = INVALID")
    ax.set_title("Latency against load")
    ax.legend(fontsize="small")
    ax.grid(True, which="both", alpha=0.3)


def draw_goodput(ax: Axes, points: Sequence[LoadPoint], xlabel: str, offered: bool) -> None:
    """Goodput and completed QPS against load (each load's median, a marker per trial);
    the y = x line when x is the offered QPS."""
    for i, (group, pts) in enumerate(_groups(points).items()):
        color = f"C{i}"
        ax.plot(*_median_line(pts, lambda p: p.goodput_qps), "-", color=color,
                label=f"{group} goodput".strip())
        ax.scatter([p.x for p in pts], [p.goodput_qps for p in pts], s=12, color=color)
        ax.plot(*_median_line(pts, lambda p: p.completed_qps), ":", color=color, alpha=0.7,
                label=f"{group} completed".strip())
    if offered and points:
        top = max(p.x for p in points)
        ax.plot([0, top], [0, top], color="grey", linewidth=0.8, label="offered")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("QPS")
    ax.set_title("Goodput (within the SLO) against load")
    ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)


def draw_spectrum(ax: Axes, hists: Mapping[str, Any], slo_ns: float | None) -> None:
    """Percentile spectrum of HDR histograms on the 1/(1-p) axis (HdrHistogram's plot)."""
    top = 2.0
    for label, hist in hists.items():
        count = int(hist.get_total_count())
        if not count:
            continue
        tail = min(6.0, math.log10(count))  # no percentile finer than one query
        inv = np.logspace(0, tail, 200)
        values = [percentile_ns(hist, 100.0 * (1 - 1 / x)) / 1e6 for x in inv]
        ax.plot(inv, values, label=f"{label} (n={count})")
        top = max(top, 10**tail)
    if slo_ns:
        ax.axhline(slo_ns / 1e6, color="red", linewidth=1, label=f"SLO {slo_ns / 1e6:g} ms")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator([1] + [x for x, _ in _NINES if x <= top]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels(["0%"] + [name for x, name in _NINES if x <= top])
    ax.set_xlabel("percentile")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency by percentile")
    ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)


def draw_timeline(ax: Axes, windows: Sequence[Mapping[str, Any]], slo_ns: float | None) -> None:
    """Latency percentiles per time window, with windows that had errors marked."""
    mids = np.array([(float(w["start_s"]) + float(w["end_s"])) / 2 for w in windows])
    for name in ("p50", "p99"):
        ys = [float(w.get("latency_ns", {}).get(name) or np.nan) / 1e6 for w in windows]
        ax.plot(mids, ys, _PERCENTILE_STYLE[name], marker=".", label=name)
    errors = np.array([int(w.get("errors", 0)) for w in windows]) > 0
    if errors.any():
        ax.scatter(mids[errors], np.zeros(int(errors.sum())), marker="v", color="red",
                   label="errors", transform=ax.get_xaxis_transform(), clip_on=False)
    if slo_ns:
        ax.axhline(slo_ns / 1e6, color="red", linewidth=1, label=f"SLO {slo_ns / 1e6:g} ms")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("latency (ms)")
    ax.set_title("Latency over time")
    ax.legend(fontsize="small")
    ax.grid(True, alpha=0.3)


def draw_batch_sizes(ax: Axes, sizes: Mapping[int, int]) -> None:
    """How many batches of each size ran."""
    pairs = sorted((int(k), int(v)) for k, v in sizes.items())
    ax.bar([str(k) for k, _ in pairs], [v for _, v in pairs], color="C2")
    ax.set_xlabel("batch size")
    ax.set_ylabel("batches")
    ax.set_title("Batch sizes")
    ax.grid(True, axis="y", alpha=0.3)


def draw_components(ax: Axes, components: Mapping[str, ComponentSummary]) -> None:
    """Mean and p99 of each latency component (ms), as paired horizontal bars."""
    names = sorted(components)
    y = np.arange(len(names))
    for offset, key, color in ((-0.2, "mean", "C0"), (0.2, "p99", "C1")):
        ax.barh(y + offset, [getattr(components[n].latency, key) / 1e6 for n in names],
                height=0.4, color=color, label=key)
    ax.set_yticks(y, names)
    ax.set_xlabel("ms")
    ax.set_title("Latency components")
    ax.legend(fontsize="small")
    ax.grid(True, axis="x", alpha=0.3)


def _to_png(fig: Figure) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=100)
    return out.getvalue()


def png(draw: Draw, size: tuple[float, float] = (7.0, 4.2)) -> bytes:
    """One plot as PNG bytes."""
    fig = Figure(figsize=size, layout="constrained")
    draw(fig.add_subplot())
    return _to_png(fig)


def compose(draws: Sequence[Draw], title: str, columns: int = 2) -> bytes:
    """Several plots in one PNG, in a grid, under a (wrapped) title."""
    rows = max(1, math.ceil(len(draws) / columns))
    fig = Figure(figsize=(7.0 * columns, 4.2 * rows + 0.6), layout="constrained")
    fig.suptitle("\n".join(textwrap.wrap(title, 80 * columns)), fontsize="medium")
    for i, draw in enumerate(draws):
        draw(fig.add_subplot(rows, columns, i + 1))
    return _to_png(fig)
