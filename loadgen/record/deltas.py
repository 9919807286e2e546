"""Reports as deltas: a worker sends what its tally gained since its last report, and the
driver adds each into running totals in place (interval recording, as HdrHistogram's
`Recorder` hands out interval histograms).

`TallyDeltas.take(now)` (worker side) encodes, in `Tally.encode`'s shape, only what
changed since the previous take: histogram gains (`histograms.Gain`, raw counts: a take
costs the issue loop one subtraction a histogram) and counter differences, the windows
touched since (the timeline from the first one touched, `windows.first`), the messages
of error kinds that changed, and the latest times. Its size follows what happened in the interval,
not the run's length. `TallySum.add(doc)` (driver side) adds one into its totals in place
and `tally()` reads them as a `Tally`. A whole encoded tally is a delta from nothing, so
the sum of a worker's deltas is its final tally, exactly.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.record.histograms import (
    Gain,
    add_into,
    counts_copy,
    gain,
    gain_blob,
    new_histogram,
)
from loadgen.record.jobs import JobTally
from loadgen.record.tally import COUNTERS, HISTOGRAMS, MAX_DETAILS, RunTimes, Tally
from loadgen.record.tokens import TOKEN_COUNTERS, TOKEN_HISTOGRAMS, TokenTally
from loadgen.record.turns import TURN_METRICS
from loadgen.record.windows import Bin, WindowCounts, widen

__all__ = ["TallyDeltas", "TallySum"]

Counts = npt.NDArray[np.unsignedinteger]


class _Snapshot:
    """One window as last sent: its counts and a copy of its histogram's counts."""

    __slots__ = ("counts", "errors", "good", "queries")

    NOTHING: ClassVar[_Snapshot]  # a window before its first query

    def __init__(self, b: Bin) -> None:
        self.queries, self.good, self.errors = b.queries, b.good, b.errors
        self.counts: Counts | None = None if b.hist is None else counts_copy(b.hist)

    def delta(self, b: Bin) -> Bin:
        """What window `b` gained since this snapshot."""
        hist = None if b.hist is None else gain(b.hist, self.counts)
        return Bin(hist, b.queries - self.queries, b.good - self.good, b.errors - self.errors)

    def absorb(self, other: _Snapshot) -> None:
        """Merge a neighbour in (the windows widened)."""
        self.queries += other.queries
        self.good += other.good
        self.errors += other.errors
        if other.counts is not None:
            self.counts = other.counts.copy() if self.counts is None else \
                self.counts + other.counts


_Snapshot.NOTHING = _Snapshot(Bin())


def _empty(b: Bin) -> bool:
    return not (b.queries or b.errors)


class TallyDeltas:
    """A worker's side: each `take` encodes what its tally gained since the last one."""

    def __init__(self) -> None:
        self._hists: dict[tuple[Any, ...], Counts] = {}  # by (section, name): as last sent
        self._sums: dict[str, dict[Any, int]] = collections.defaultdict(dict)
        self._messages: dict[str, tuple[str, ...]] = {}
        self._width = 0
        self._timeline: dict[int, _Snapshot] = {}
        self._steps: dict[int, _Snapshot] = {}

    def take(self, now: Tally) -> dict[str, Any]:
        """`now` (the worker's whole tally so far) less what earlier takes sent, encoded."""
        counters = self._gained("counters", {k: getattr(now, k) for k in COUNTERS})
        windows, first = self._windows(now.windows)
        delta = Tally(
            histograms={k: self._hist(("h", k), h) for k, h in now.histograms.items()},
            components={k: self._hist(("c", k), h) for k, h in now.components.items()},
            batch_sizes=self._gained("batch", now.batch_sizes),
            errors_by_kind=self._gained("errors", now.errors_by_kind),
            error_messages={k: v for k, v in now.error_messages.items()
                            if self._messages.get(k) != v},
            **{k: counters.get(k, 0) for k in COUNTERS},
            last_done_ns=now.last_done_ns, windows=windows, times=now.times,
            tokens=None if now.tokens is None else self._tokens(now.tokens),
            jobs=None if now.jobs is None else self._jobs(now.jobs))
        self._messages.update(now.error_messages)
        doc = delta.encode(gain_blob)  # each histogram's `Gain`: no scan, no zlib
        doc["windows"]["first"] = first
        return doc

    def _hist(self, key: tuple[Any, ...], now: HdrHistogram) -> Gain:
        gained = gain(now, self._hists.get(key))
        if gained.total_count:
            self._hists[key] = counts_copy(now)
        return gained

    def _gained(self, section: str, now: Mapping[Any, int]) -> dict[Any, int]:
        before = self._sums[section]
        out = {k: v - before.get(k, 0) for k, v in now.items() if v != before.get(k, 0)}
        before.update(now)
        return out

    def _tokens(self, now: TokenTally) -> TokenTally:
        counters = self._gained("tokens", now.counters)
        return TokenTally({k: self._hist(("t", k), h) for k, h in now.histograms.items()},
                          {k: counters.get(k, 0) for k in now.counters},
                          {turn: {k: self._hist(("turn", turn, k), h) for k, h in hists.items()}
                           for turn, hists in now.turns.items()})

    def _jobs(self, now: JobTally) -> JobTally:
        counters = self._gained("jobs", now.counters)
        return JobTally(now.deadline_ns, {k: counters.get(k, 0) for k in now.counters},
                        self._hist(("j",), now.time_ns))

    def _windows(self, now: WindowCounts) -> tuple[WindowCounts, int]:
        """The windows touched since the last take (from the first of them), and where
        they start; the snapshots follow a timeline that widened."""
        if self._width and now.width_ns != self._width:
            factor = now.width_ns // self._width
            wider: dict[int, _Snapshot] = {}
            for i in sorted(self._timeline):
                snap = self._timeline[i]
                if i // factor in wider:
                    wider[i // factor].absorb(snap)
                else:
                    wider[i // factor] = snap
            self._timeline = wider
        self._width = now.width_ns
        touched = self._touched(now.timeline, self._timeline)
        first = min(touched, default=0)
        timeline = [touched.get(i, Bin()) for i in range(first, max(touched, default=-1) + 1)]
        steps_touched = self._touched(now.steps, self._steps)
        steps = [steps_touched.get(i, Bin()) for i in range(len(now.steps))]
        return WindowCounts(now.width_ns, tuple(timeline), tuple(steps)), first

    @staticmethod
    def _touched(bins: tuple[Bin, ...], sent: dict[int, _Snapshot]) -> dict[int, Bin]:
        """Each window that changed since `sent`: its gain (and `sent` brought up to date)."""
        out = {}
        for i, b in enumerate(bins):
            snap = sent.get(i)
            if snap is None:
                if not _empty(b):
                    out[i] = _Snapshot.NOTHING.delta(b)
                    sent[i] = _Snapshot(b)
            elif snap.queries != b.queries or snap.errors != b.errors:
                out[i] = snap.delta(b)
                sent[i] = _Snapshot(b)
        return out


class TallySum:
    """The driver's side: deltas added into running totals in place; `tally` reads them."""

    def __init__(self) -> None:
        self.hists = {k: new_histogram() for k in HISTOGRAMS}
        self.components: dict[str, HdrHistogram] = {}
        self.batch: collections.Counter[int] = collections.Counter()
        self.errors: collections.Counter[str] = collections.Counter()
        self.messages: dict[str, list[str]] = {}
        self.counters = dict.fromkeys(COUNTERS, 0)
        self.last_done_ns = 0
        self.width_ns = 0
        self.timeline: list[Bin] = []
        self.steps: list[Bin] = []
        self.times: RunTimes | None = None
        self.tokens: TokenTally | None = None
        self.jobs: JobTally | None = None
        self.reports = 0

    def add(self, doc: dict[str, Any]) -> None:
        """Add one encoded delta (or a whole encoded tally) in place."""
        part = Tally.decode(doc)
        for k, h in part.histograms.items():
            add_into(self.hists.setdefault(k, new_histogram()), h)
        for k, h in part.components.items():
            add_into(self.components.setdefault(k, new_histogram()), h)
        self.batch.update(part.batch_sizes)
        self.errors.update(part.errors_by_kind)
        for kind, messages in part.error_messages.items():
            kept = self.messages.setdefault(kind, [])
            kept += [m for m in messages if m not in kept][:max(MAX_DETAILS - len(kept), 0)]
        for k in COUNTERS:
            self.counters[k] += getattr(part, k)
        self.last_done_ns = max(self.last_done_ns, part.last_done_ns)
        self.times = part.times
        self._windows(part.windows, int(doc["windows"].get("first", 0)))
        if part.tokens is not None:
            self._tokens(part.tokens)
        if part.jobs is not None:
            self.jobs = part.jobs if self.jobs is None else JobTally.merge([self.jobs, part.jobs])
        self.reports += 1

    def _windows(self, part: WindowCounts, first: int) -> None:
        bins = list(part.timeline)
        if part.width_ns > self.width_ns and self.width_ns:
            self.timeline = widen(self.timeline, part.width_ns // self.width_ns)
        elif part.width_ns < self.width_ns:  # another worker's, on a finer timeline
            factor = self.width_ns // part.width_ns
            bins = widen([Bin() for _ in range(first % factor)] + bins, factor)
            first //= factor
        self.width_ns = max(self.width_ns, part.width_ns)
        self.timeline += [Bin() for _ in range(first + len(bins) - len(self.timeline))]
        for i, b in enumerate(bins):
            self.timeline[first + i].absorb(b)
        self.steps += [Bin() for _ in range(len(part.steps) - len(self.steps))]
        for mine, theirs in zip(self.steps, part.steps, strict=False):
            mine.absorb(theirs)

    def _tokens(self, part: TokenTally) -> None:
        if self.tokens is None:
            self.tokens = TokenTally({k: new_histogram() for k in TOKEN_HISTOGRAMS},
                                     dict.fromkeys(TOKEN_COUNTERS, 0), {})
        mine = self.tokens
        for k, h in part.histograms.items():
            add_into(mine.histograms[k], h)
        for k, v in part.counters.items():
            mine.counters[k] = mine.counters.get(k, 0) + v
        for turn, hists in part.turns.items():
            kept = mine.turns.setdefault(turn, {k: new_histogram() for k in TURN_METRICS})
            for k, h in hists.items():
                add_into(kept[k], h)

    def tally(self) -> Tally:
        """The totals as a `Tally` (sharing the running histograms: read, do not keep)."""
        assert self.times is not None, "add a report first"
        return Tally(
            histograms=dict(self.hists), components=dict(sorted(self.components.items())),
            batch_sizes=dict(sorted(self.batch.items())), errors_by_kind=dict(self.errors),
            error_messages={k: tuple(v) for k, v in self.messages.items()},
            **self.counters, last_done_ns=self.last_done_ns,
            windows=WindowCounts(self.width_ns, tuple(self.timeline), tuple(self.steps)),
            times=self.times, tokens=None if self.tokens is None else TokenTally(
                dict(self.tokens.histograms), dict(self.tokens.counters),
                {t: dict(h) for t, h in sorted(self.tokens.turns.items())}), jobs=self.jobs)
