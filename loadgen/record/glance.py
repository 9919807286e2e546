"""A glance at a run in progress: running latency, issue lag and errors, read cheaply.

For live displays. It reads only what the collector already keeps, and flushes nothing:
the values its recorders still buffer (the latest queries, at most 16,384 each), the
latency windows the engine's slack has filled, and the issue-lag histogram as recorded
so far. A progress report reads at most `RECENT_WINDOWS` window histograms of about 2,700
counters each and a percentile of each buffer: a fraction of a millisecond, a few times
a second, and no work at all per query.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.record.collect import Collector
from loadgen.record.histograms import Recorder, percentile_ns, percentiles_ns
from loadgen.record.windows import Bin

__all__ = ["RECENT_WINDOWS", "Glance", "decode_glance", "encode_glance", "glance",
           "merge_glances"]

RECENT_WINDOWS = 2
"""The running p50/p99 read the latest this-many filled windows and the buffered values."""


@dataclass(frozen=True, slots=True)
class Glance:
    """Figures of a run in progress (None where nothing has been recorded yet)."""

    p50_ns: int | None
    p99_ns: int | None
    within_slo: float | None  # share of answered measured queries within the SLO so far
    issue_lag_p99_ns: int | None
    errors_by_kind: tuple[tuple[str, int], ...] = ()


def _percentiles(values: npt.NDArray[np.int64], bins: list[Bin]) -> list[int]:
    """p50 and p99 of the buffered values and each recent window: the worst of each (a
    window still filling reads low, so the worst of the recent few is the honest figure)."""
    found = [_inverted_cdf(values, (50.0, 99.0))] if values.size else []
    found += [percentiles_ns(b.hist, (50.0, 99.0)) for b in bins]
    return [max(f[i] for f in found) for i in (0, 1)]


def _inverted_cdf(values: npt.NDArray[np.int64], ps: Sequence[float]) -> list[int]:
    """`np.percentile(values, ps, method="inverted_cdf")` by one in-place partition of
    `values` (a copy the caller owns): a third of its cost, on a worker's issue loop."""
    n = values.size
    ranks = [min(max(math.ceil(n * (p / 100)) - 1, 0), n - 1) for p in ps]
    values.partition(ranks)
    return [int(values[k]) for k in ranks]


def _lag_p99(lag: Recorder) -> int | None:
    """The issue lag's p99 so far: from the histogram once it holds the larger part."""
    hist = lag.recorded_histogram
    if hist.total_count >= lag.pending:
        return percentile_ns(hist, 99.0) if hist.total_count else None
    return _inverted_cdf(lag.pending_values, (99.0,))[0]


def glance(collector: Collector) -> Glance:
    """The collector's running figures, without flushing a buffer."""
    bins = list(collector.windows.counts().timeline)
    recent = [b for b in bins if b.hist is not None and b.hist.total_count][-RECENT_WINDOWS:]
    values = collector.query_latency.pending_values
    p50 = p99 = within = None
    if values.size or recent:
        p50, p99 = _percentiles(values, recent)
        answered = sum(b.queries for b in bins) + values.size
        good = sum(b.good for b in bins) + int(np.count_nonzero(values <= collector.slo_ns))
        within = good / answered
    return Glance(p50, p99, within, _lag_p99(collector.issue_lag),
                  tuple(sorted(collector.errors_by_kind.items())))


def merge_glances(parts: list[Glance]) -> Glance:
    """Several load processes' glances as one: the worst latency and lag, errors summed."""
    def worst(values: list[int | None]) -> int | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    shares = [g.within_slo for g in parts if g.within_slo is not None]
    errors: dict[str, int] = {}
    for g in parts:
        for kind, count in g.errors_by_kind:
            errors[kind] = errors.get(kind, 0) + count
    return Glance(worst([g.p50_ns for g in parts]), worst([g.p99_ns for g in parts]),
                  min(shares) if shares else None,
                  worst([g.issue_lag_p99_ns for g in parts]), tuple(sorted(errors.items())))


def encode_glance(g: Glance) -> list[Any]:
    """A glance as plain JSON-able numbers, for a load worker's report."""
    return [g.p50_ns, g.p99_ns, g.within_slo, g.issue_lag_p99_ns,
            [[kind, count] for kind, count in g.errors_by_kind]]


def decode_glance(body: Sequence[Any]) -> Glance:
    """The glance `encode_glance` wrote."""
    p50, p99, within, lag, errors = body
    return Glance(p50, p99, within, lag, tuple((str(k), int(n)) for k, n in errors))
