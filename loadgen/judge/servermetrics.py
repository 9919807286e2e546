"""The server's own figures over the measured window, from the scraped `/metrics`.

Pure: (scrape trace, window, run start) -> `ServerMetrics`. The window opens at the last
scrape at or before its start (else the first) and closes at the first at or after its end
(else the last). Counters are per-run deltas over it (summed over label sets; a series that
went down was reset, and counts from 0), gauges are time series on the client's time axis
(seconds from the run's start, as the timeline's), and histograms give per-run percentiles
of their bucket deltas (linear within a bucket, as Prometheus' `histogram_quantile`).
Names are mapped by `servernames`; with `raw`, every unmapped family is kept too.

`deltas` always holds `prefix_cache_hit_rate`, `preemptions` and `kv_cache_usage_max`
(None where the server does not expose them), every mapped counter's delta, the gauges'
maxima, and spec-decode `spec_decode_acceptance_rate` (accepted / draft tokens) and
`spec_decode_mean_acceptance_length` (1 + accepted / drafts, as vLLM defines it; SGLang's
`spec_accept_length` gauge averaged where that is what it gives).
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from loadgen.judge.servernames import COUNTERS, GAUGES, HISTOGRAMS, Candidate, flavour_of
from loadgen.record.scrape import Scrape, ScrapeTrace

__all__ = ["ServerMetrics", "gauges_now", "server_metrics", "server_warnings"]

_QUANTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))


@dataclass(frozen=True, slots=True)
class ServerMetrics:
    """result.json's `server_metrics`."""

    source: str | None  # the URL scraped; None when nothing was
    interval_s: float
    scrapes: int = 0
    failed_scrapes: int = 0
    errors: list[str] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)  # vllm, sglang, tgi: names recognised
    window_s: list[float] = field(default_factory=list)  # [open, close], client time axis
    series: dict[str, list[list[float]]] = field(default_factory=dict)  # [[t_s, value], ...]
    deltas: dict[str, float | None] = field(default_factory=dict)
    histograms: dict[str, dict[str, float]] = field(default_factory=dict)  # *_ns, count
    raw: dict[str, Any] | None = None
    reason: str = ""  # why nothing was scraped, when so

    def as_dict(self) -> dict[str, Any]:
        """Plain values."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ServerMetrics:
        """Read back `as_dict`."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})

    @classmethod
    def not_scraped(cls, reason: str, interval_s: float) -> ServerMetrics:
        """No endpoint to scrape, and why."""
        return cls(None, interval_s, deltas=_required({}), reason=reason)


def _required(deltas: dict[str, float | None]) -> dict[str, float | None]:
    return {"prefix_cache_hit_rate": None, "preemptions": None, "kv_cache_usage_max": None,
            **deltas}


def _bounds(scrapes: tuple[Scrape, ...], start_ns: int, end_ns: int) -> tuple[int, int]:
    """Indices of the scrapes that open and close the window."""
    before = [i for i, s in enumerate(scrapes) if s.t_ns <= start_ns]
    after = [i for i, s in enumerate(scrapes) if s.t_ns >= end_ns]
    first = before[-1] if before else 0
    last = after[0] if after else len(scrapes) - 1
    return first, max(first, last)


def _pick(candidates: Iterable[Candidate], types: dict[str, str]) -> Candidate | None:
    return next((c for c in candidates if c.family in types), None)


def _by_labels(scrape: Scrape, family: str, sample: str) -> dict[tuple[Any, ...], float]:
    return {labels: v for (f, name, labels), v in scrape.values.items()
            if f == family and name == sample}


def _counter(a: Scrape, b: Scrape, family: str, sample: str) -> float:
    """The growth of every series of `sample` from `a` to `b` (a reset counts from 0)."""
    start = _by_labels(a, family, sample)
    total = 0.0
    for labels, value in _by_labels(b, family, sample).items():
        grown = value - start.get(labels, 0.0)
        total += grown if grown >= 0 else value
    return total


def _counter_sample(c: Candidate, types: dict[str, str]) -> str:
    if c.from_sum:
        return f"{c.family}_sum"
    return f"{c.family}_total" if types.get(c.family) == "counter" else c.family


def _gauge(scrape: Scrape, c: Candidate, how: str) -> float | None:
    values = list(_by_labels(scrape, c.family, c.family).values())
    if not values:
        return None
    return (max(values) if how == "max" else sum(values)) * c.scale


def _quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """`histogram_quantile` over cumulative (upper bound, count) buckets, sorted."""
    total = buckets[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower
            width = count - below
            return lower + (bound - lower) * ((rank - below) / width if width else 1.0)
        lower, below = bound, count
    return lower


def _histogram(a: Scrape, b: Scrape, family: str, scale: float) -> dict[str, float] | None:
    grown: dict[float, float] = defaultdict(float)
    start = {(labels, name): v for (f, name, labels), v in a.values.items() if f == family}
    for (f, name, labels), value in b.values.items():
        if f != family or name != f"{family}_bucket":
            continue
        le = float(dict(labels)["le"])
        before = start.get((labels, name), 0.0)
        grown[le] += value - before if value >= before else value
    buckets = sorted(grown.items())
    if not buckets or buckets[-1][1] <= 0:
        return None
    count = buckets[-1][1]
    total_s = _counter(a, b, family, f"{family}_sum")
    out: dict[str, float] = {"count": int(count), "mean_ns": round(total_s / count * scale * 1e9)}
    for key, q in _QUANTILES:
        out[f"{key}_ns"] = round(_quantile(buckets, q) * scale * 1e9)
    return out


def _derived(d: dict[str, float | None], series: dict[str, list[list[float]]]) -> None:
    queries, hits = d.get("prefix_cache_queries"), d.get("prefix_cache_hits")
    if queries and hits is not None:
        d["prefix_cache_hit_rate"] = hits / queries
    for name, points in series.items():
        if points:
            d[f"{name}_max"] = max(v for _, v in points)
    draft, accepted = d.get("spec_decode_draft_tokens"), d.get("spec_decode_accepted_tokens")
    if draft and accepted is not None:
        d["spec_decode_acceptance_rate"] = accepted / draft
    drafts = d.get("spec_decode_drafts")
    if drafts and accepted is not None:
        d["spec_decode_mean_acceptance_length"] = 1 + accepted / drafts
    elif series.get("spec_accept_length"):
        points = series["spec_accept_length"]
        d["spec_decode_mean_acceptance_length"] = sum(v for _, v in points) / len(points)


def _raw(trace: ScrapeTrace, a: Scrape, b: Scrape, window: tuple[Scrape, ...], origin_ns: int,
         mapped: set[str]) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for family, kind in sorted(trace.types.items()):
        if family in mapped:
            continue
        if kind == "counter":
            raw[family] = {"type": kind, "delta": _counter(a, b, family, f"{family}_total")}
        elif kind == "gauge":
            raw[family] = {"type": kind, "series": [
                [(s.t_ns - origin_ns) / 1e9, v] for s in window
                if (v := _gauge(s, Candidate(family), "sum")) is not None]}
        elif kind == "histogram":
            raw[family] = {"type": kind, "count": _counter(a, b, family, f"{family}_count"),
                           "sum": _counter(a, b, family, f"{family}_sum")}
    return raw


def server_metrics(trace: ScrapeTrace, start_ns: int, end_ns: int, origin_ns: int,
                   raw: bool = False) -> ServerMetrics:
    """The server's figures over [start_ns, end_ns]; series timed from `origin_ns`."""
    scrapes, types = trace.scrapes, trace.types
    base = ServerMetrics(trace.url, trace.interval_s, len(scrapes), trace.failures,
                         list(trace.errors))
    if not scrapes:
        return dataclasses.replace(base, deltas=_required({}),
                                   reason="no scrape succeeded")
    first, last = _bounds(scrapes, start_ns, end_ns)
    a, b, window = scrapes[first], scrapes[last], scrapes[first:last + 1]
    used: set[str] = set()
    deltas: dict[str, float | None] = {}
    for name, candidates in COUNTERS.items():
        if (c := _pick(candidates, types)) is not None:
            deltas[name] = _counter(a, b, c.family, _counter_sample(c, types)) * c.scale
            used.add(c.family)
    series: dict[str, list[list[float]]] = {}
    for name, (candidates, how) in GAUGES.items():
        if (c := _pick(candidates, types)) is not None:
            series[name] = [[(s.t_ns - origin_ns) / 1e9, v] for s in window
                            if (v := _gauge(s, c, how)) is not None]
            used.add(c.family)
    histograms: dict[str, dict[str, float]] = {}
    for name, candidates in HISTOGRAMS.items():
        c = _pick(candidates, types)
        if c is not None and (h := _histogram(a, b, c.family, c.scale)) is not None:
            histograms[name] = h
            used.add(c.family)
    _derived(deltas, series)
    servers = sorted({f for family in used if (f := flavour_of(family)) is not None})
    return dataclasses.replace(
        base, servers=servers,
        window_s=[(a.t_ns - origin_ns) / 1e9, (b.t_ns - origin_ns) / 1e9],
        series=series, deltas=_required(deltas), histograms=histograms,
        raw=_raw(trace, a, b, window, origin_ns, used) if raw else None)


def gauges_now(scrape: Scrape, types: dict[str, str]) -> dict[str, float]:
    """One scrape's mapped gauges (`kv_cache_usage`, `requests_running`, ...), for live use."""
    out: dict[str, float] = {}
    for name, (candidates, how) in GAUGES.items():
        c = _pick(candidates, types)
        if c is not None and (value := _gauge(scrape, c, how)) is not None:
            out[name] = value
    return out


def server_warnings(m: ServerMetrics) -> list[str]:
    """What the verdict warns of a scrape that failed (never a reason: the run stands)."""
    if m.source is None:
        return []
    why = f" ({m.errors[0]})" if m.errors else ""
    if not m.scrapes:
        return [(f"server_metrics: {m.source} could not be scraped{why}; no server figures, "
                "the client's stand")]
    if m.failed_scrapes:
        return [(f"server_metrics: {m.failed_scrapes} of {m.scrapes + m.failed_scrapes} "
                f"scrapes of {m.source} failed{why}")]
    return []
