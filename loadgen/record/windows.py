"""Windows of scheduled time: a timeline of the run, and one window per step.

A query belongs to the window of its scheduled time. Each window keeps counts
(queries answered, good = within the SLO, errors) and a latency histogram at
2 significant digits (36 KB, made on first use). Timeline windows are
`window_s` wide from the start of measurement; whenever a query would need
more than `MAX_WINDOWS`, the width doubles and neighbours merge exactly, so
memory stays bounded however long the run.

On the hot path the collector's query-latency recorder is a `WindowedRecorder`:
beside each latency it buffers the scheduled time (one more array store), and
each flush step files its slice of the buffer into the windows with numpy. It subclasses
`record.Recorder` and shares its buffer, so it leans on that class's layout.
"""

from __future__ import annotations

import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.record.histograms import (
    BUFFER_CAPACITY,
    HIGHEST_NS,
    LOWEST_NS,
    HistText,
    Recorder,
    decode,
    encode,
    record_array,
    summary_ns,
    written,
)

__all__ = [
    "MAX_WINDOWS",
    "WINDOW_DIGITS",
    "Bin",
    "WindowCounts",
    "WindowedRecorder",
    "Windows",
    "merge_windows",
    "steps_report",
    "timeline_report",
    "widen",
]

WINDOW_DIGITS = 2
MAX_WINDOWS = 200
Ints = npt.NDArray[np.int64]


def _new_hist() -> HdrHistogram:
    return HdrHistogram(LOWEST_NS, HIGHEST_NS, WINDOW_DIGITS)


@dataclass(slots=True)
class Bin:
    """One window: a latency histogram (None while empty) and counts."""

    hist: HdrHistogram | None = None
    queries: int = 0
    good: int = 0
    errors: int = 0

    def absorb(self, other: Bin) -> None:
        """Add another window of the same layout into this one, exactly."""
        self.queries += other.queries
        self.good += other.good
        self.errors += other.errors
        src = other.hist
        if src is None or src.total_count == 0:
            return
        if self.hist is None:
            self.hist = _new_hist()
        dst = self.hist
        np.ctypeslib.as_array(dst.counts)[:] += np.ctypeslib.as_array(src.counts)
        dst.total_count += src.total_count
        dst.min_value = min(dst.min_value, src.min_value)
        dst.max_value = max(dst.max_value, src.max_value)

    def encode(self, text: HistText = encode) -> list[Any]:
        """[histogram as `text` (V2 base64 by default) or None, queries, good, errors]."""
        hist = None if self.hist is None else written(self.hist, text)
        return [hist, self.queries, self.good, self.errors]

    @classmethod
    def decode(cls, row: Sequence[Any]) -> Bin:
        """The inverse of `encode` (a malformed histogram raises ResultError)."""
        hist, queries, good, errors = row
        return cls(None if hist is None else decode(hist), int(queries), int(good), int(errors))


def _widen(bins: list[Bin], factor: int) -> list[Bin]:
    """Merge each run of `factor` neighbours into one window."""
    out = [Bin() for _ in range((len(bins) + factor - 1) // factor)]
    for i, b in enumerate(bins):
        out[i // factor].absorb(b)
    return out


def widen(bins: list[Bin], factor: int) -> list[Bin]:
    """Windows `factor` times wider: each run of `factor` neighbours merged into one."""
    return _widen(bins, factor)


def _file(bins: list[Bin], idx: Ints, latency: Ints, good: npt.NDArray[np.bool_]) -> None:
    """Record each latency into its window (idx must be within bins)."""
    lo, hi = int(idx.min()), int(idx.max())
    used = [lo] if lo == hi else (lo + np.flatnonzero(np.bincount(idx - lo))).tolist()
    for i in used:
        if lo == hi:  # the usual case: the whole buffer falls in one window
            part, ok = latency, good
        else:
            mask = idx == i
            part, ok = latency[mask], good[mask]
        b = bins[i]
        if b.hist is None:
            b.hist = _new_hist()
        record_array(b.hist, part)  # out-of-range values are counted by the collector
        b.queries += int(part.size)
        b.good += int(np.count_nonzero(ok))


@dataclass(frozen=True, slots=True)
class WindowCounts:
    """A finished run's windows: timeline width and bins, and one bin per step."""

    width_ns: int
    timeline: tuple[Bin, ...]
    steps: tuple[Bin, ...]

    def encode(self, text: HistText = encode) -> dict[str, Any]:
        """Plain values (for sending between processes); histograms as `text`."""
        return {"width_ns": self.width_ns, "timeline": [b.encode(text) for b in self.timeline],
                "steps": [b.encode(text) for b in self.steps]}

    @classmethod
    def decode(cls, doc: dict[str, Any]) -> WindowCounts:
        """The inverse of `encode`."""
        return cls(int(doc["width_ns"]), tuple(Bin.decode(r) for r in doc["timeline"]),
                   tuple(Bin.decode(r) for r in doc["steps"]))


def merge_windows(parts: Sequence[WindowCounts]) -> WindowCounts:
    """Windows of several load processes (same start, same steps) as one."""
    width = max(p.width_ns for p in parts)
    timeline: list[Bin] = []
    steps = [Bin() for _ in parts[0].steps]
    for part in parts:
        bins = _widen(list(part.timeline), width // part.width_ns)
        timeline += [Bin() for _ in range(len(bins) - len(timeline))]
        for mine, theirs in zip(timeline, bins, strict=False):
            mine.absorb(theirs)
        for mine, theirs in zip(steps, part.steps, strict=True):
            mine.absorb(theirs)
    return WindowCounts(width, tuple(timeline), tuple(steps))


class Windows:
    """Live window state of one run, filled in bulk by a `WindowedRecorder`."""

    def __init__(self, width_ns: int, slo_ns: int, step_starts_ns: Sequence[int] = ()) -> None:
        self.width_ns = width_ns
        self.slo_ns = slo_ns
        self._step_starts = np.asarray(step_starts_ns, dtype=np.int64)
        self._t0 = self._measure_start = 0
        self._timeline: list[Bin] = []
        self._steps = [Bin() for _ in step_starts_ns]

    def started(self, t0_ns: int, measure_start_ns: int) -> None:
        """The run's clock origin and the start of its measured window."""
        self._t0, self._measure_start = t0_ns, measure_start_ns

    def file(self, scheduled_ns: Ints, latency_ns: Ints) -> None:
        """Record answered queries into the windows of their scheduled times."""
        good = latency_ns <= self.slo_ns
        idx = self._timeline_index(scheduled_ns)  # may widen: a new list of bins
        _file(self._timeline, idx, latency_ns, good)
        if self._steps:
            _file(self._steps, self._step_index(scheduled_ns), latency_ns, good)

    def error(self, scheduled_ns: int) -> None:
        """Count one measured query that failed."""
        when = np.array([scheduled_ns], dtype=np.int64)
        i = int(self._timeline_index(when)[0])  # first: it may widen the timeline
        self._timeline[i].errors += 1
        if self._steps:
            self._steps[int(self._step_index(when)[0])].errors += 1

    def counts(self) -> WindowCounts:
        """The windows as they stand (flush the recorder first)."""
        return WindowCounts(self.width_ns, tuple(self._timeline), tuple(self._steps))

    def _timeline_index(self, when: Ints) -> Ints:
        offset = np.maximum(when - self._measure_start, 0)
        while int(offset.max()) // self.width_ns >= MAX_WINDOWS:
            self._timeline = _widen(self._timeline, 2)
            self.width_ns *= 2
        idx = offset // self.width_ns
        need = int(idx.max()) + 1 - len(self._timeline)
        if need > 0:
            self._timeline += [Bin() for _ in range(need)]
        return idx

    def _step_index(self, when: Ints) -> Ints:
        idx = np.searchsorted(self._step_starts, when - self._t0, side="right") - 1
        return np.maximum(idx, 0).astype(np.int64)


class WindowedRecorder(Recorder):
    """A `Recorder` whose values also land in the window of their scheduled time."""

    __slots__ = ("_when", "_whens", "windows")

    def __init__(self, windows: Windows) -> None:
        super().__init__()
        self._when = array.array("q", bytes(8 * BUFFER_CAPACITY))
        self._whens = np.frombuffer(self._when, dtype=np.int64)
        self.windows = windows

    def add(self, value: int) -> None:
        """Not for this recorder: every value needs its scheduled time (`add_at`)."""
        raise TypeError("WindowedRecorder.add_at(scheduled_ns, value), not add(value)")

    def add_at(self, scheduled_ns: int, value: int) -> None:
        """Buffer one latency in ns and its query's scheduled time (the hot call)."""
        n = self._n
        try:
            self._buf[n] = value
        except OverflowError:
            self._out_of_range += 1
            return
        self._when[n] = scheduled_ns
        n += 1
        self._n = n
        if n == BUFFER_CAPACITY:
            self.flush_some()

    def _record(self, start: int, stop: int) -> None:
        """File the values into the windows, then into the histogram."""
        if stop > start:
            self.windows.file(self._whens[start:stop], self._values[start:stop])
        super()._record(start, stop)


def _figures(b: Bin) -> dict[str, Any]:
    empty = _new_hist() if b.hist is None else b.hist
    return {"queries": b.queries, "good": b.good, "errors": b.errors,
            "latency_ns": summary_ns(empty)}


def timeline_report(w: WindowCounts, lead_s: float) -> list[dict[str, Any]]:
    """One entry per window, up to the last one used; times from the run's start."""
    used = [i for i, b in enumerate(w.timeline) if b.queries or b.errors]
    width_s = w.width_ns / 1e9
    return [{"start_s": round(lead_s + i * width_s, 9),
             "end_s": round(lead_s + (i + 1) * width_s, 9), **_figures(b)}
            for i, b in enumerate(w.timeline[: used[-1] + 1 if used else 0])]


def steps_report(w: WindowCounts, starts_s: Sequence[float], measured_s: tuple[float, float],
                 planned: Callable[[float, float], float]) -> list[dict[str, Any]]:
    """One entry per step: its measured span, planned and scheduled rates, goodput, latency.

    `measured_s` is (start, end) of measurement from the run's start; `planned(a, b)`
    the mean planned rate between a and b seconds.
    """
    out = []
    ends = [*starts_s[1:], measured_s[1]]
    for i, (b, start, end) in enumerate(zip(w.steps, starts_s, ends, strict=True)):
        lo, hi = max(start, measured_s[0]), min(end, measured_s[1])
        span = max(hi - lo, 0.0)
        scale = 1 / span if span > 0 else 0.0
        out.append({"step": i, "start_s": start, "end_s": end, "measured_s": round(span, 9),
                    "target_qps": round(planned(lo, hi), 6) if span > 0 else 0.0,
                    "qps_scheduled": (b.queries + b.errors) * scale,
                    "goodput_qps": b.good * scale, **_figures(b)})
    return out
