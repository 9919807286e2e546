"""A finished run's raw figures: times, histograms, counters and windows, exactly mergeable.

The collector hands one over when a run ends; several load processes each
send theirs encoded (HDR V2 text and plain numbers), and `merge_tallies` adds
them into one, exactly, so the merged run reads like a single-process one.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.record.histograms import HistText, decode, encode, merge, new_histogram, written
from loadgen.record.jobs import JobTally
from loadgen.record.tokens import TokenTally
from loadgen.record.windows import WindowCounts, merge_windows

__all__ = ["COUNTERS", "HISTOGRAMS", "MAX_DETAILS", "Accuracy", "RunTimes", "Tally",
           "merge_tallies"]

MAX_DETAILS = 3
"""Distinct failure messages kept per error kind."""
HISTOGRAMS = ("latency_ns", "service_latency_ns", "issue_lag_ns", "query_latency_ns")
COUNTERS = ("queries", "samples", "overlatency", "late", "out_of_range")


@dataclass(frozen=True, slots=True)
class RunTimes:
    """When the run started, began measuring, stopped issuing and ended (perf_counter ns)."""

    start_ns: int
    measure_start_ns: int
    issue_end_ns: int
    end_ns: int
    interrupted: bool
    unfinished: int

    @classmethod
    def merge(cls, parts: Sequence[RunTimes]) -> RunTimes:
        """The span of several load processes that started together."""
        return cls(parts[0].start_ns, parts[0].measure_start_ns,
                   max(t.issue_end_ns for t in parts), max(t.end_ns for t in parts),
                   any(t.interrupted for t in parts), sum(t.unfinished for t in parts))


@dataclass(frozen=True, slots=True)
class Accuracy:
    """An accuracy run's score: the SUT's `value` over `samples` (None: it cannot score)."""

    value: float | None
    samples: int


@dataclass(frozen=True, slots=True)
class Tally:
    """What the statistics read about one run (or several merged)."""

    histograms: dict[str, HdrHistogram]  # keyed by HISTOGRAMS
    components: dict[str, HdrHistogram]
    batch_sizes: dict[int, int]
    errors_by_kind: dict[str, int]
    error_messages: dict[str, tuple[str, ...]]  # per kind, the first few distinct messages
    queries: int
    samples: int
    overlatency: int
    late: int
    out_of_range: int
    last_done_ns: int
    windows: WindowCounts
    times: RunTimes
    tokens: TokenTally | None = None  # a token-stream run's figures
    jobs: JobTally | None = None  # agentic jobs' figures (`session_file`)

    def encode(self, text: HistText = encode) -> dict[str, Any]:
        """Plain values: histograms as `text`, V2 base64 by default (empty ones as None;
        a load worker's reports use `gain_blob`)."""
        return {
            "histograms": {k: written(h, text) for k, h in self.histograms.items()},
            "components": {k: written(h, text) for k, h in self.components.items()},
            "batch_sizes": dict(self.batch_sizes), "errors_by_kind": dict(self.errors_by_kind),
            "error_messages": {k: list(v) for k, v in self.error_messages.items()},
            **{k: getattr(self, k) for k in COUNTERS},
            "last_done_ns": self.last_done_ns, "windows": self.windows.encode(text),
            "times": dataclasses.asdict(self.times),
            "tokens": None if self.tokens is None else self.tokens.encode(text),
            "jobs": None if self.jobs is None else self.jobs.encode(text),
        }

    @classmethod
    def decode(cls, doc: dict[str, Any]) -> Tally:
        """The inverse of `encode` (a malformed histogram raises ResultError)."""
        def hist(text: str | None) -> HdrHistogram:
            return new_histogram() if text is None else decode(text)

        return cls(
            histograms={k: hist(v) for k, v in doc["histograms"].items()},
            components={k: hist(v) for k, v in doc["components"].items()},
            batch_sizes={int(k): int(v) for k, v in doc["batch_sizes"].items()},
            errors_by_kind={str(k): int(v) for k, v in doc["errors_by_kind"].items()},
            error_messages={str(k): tuple(map(str, v))
                            for k, v in doc.get("error_messages", {}).items()},
            **{k: int(doc[k]) for k in COUNTERS},
            last_done_ns=int(doc["last_done_ns"]),
            windows=WindowCounts.decode(doc["windows"]),
            times=RunTimes(**doc["times"]),
            tokens=None if doc.get("tokens") is None else TokenTally.decode(doc["tokens"]),
            jobs=None if doc.get("jobs") is None else JobTally.decode(doc["jobs"]),
        )


def merge_tallies(parts: Sequence[Tally]) -> Tally:
    """One tally holding every part's counts (histograms merged exactly)."""
    components = sorted({name for p in parts for name in p.components})
    batch: collections.Counter[int] = collections.Counter()
    errors: collections.Counter[str] = collections.Counter()
    for p in parts:
        batch.update(p.batch_sizes)
        errors.update(p.errors_by_kind)
    return Tally(
        histograms={k: merge(p.histograms[k] for p in parts) for k in HISTOGRAMS},
        components={k: merge(p.components[k] for p in parts if k in p.components)
                    for k in components},
        batch_sizes=dict(sorted(batch.items())),
        errors_by_kind=dict(errors),
        error_messages=_merge_messages(parts),
        **{k: sum(getattr(p, k) for p in parts) for k in COUNTERS},
        last_done_ns=max(p.last_done_ns for p in parts),
        windows=merge_windows([p.windows for p in parts]),
        times=RunTimes.merge([p.times for p in parts]),
        tokens=_merge_tokens(parts),
        jobs=_merge_jobs(parts),
    )


def _merge_tokens(parts: Sequence[Tally]) -> TokenTally | None:
    """The parts' token figures merged; None when no part streamed tokens."""
    tokens = [p.tokens for p in parts if p.tokens is not None]
    return TokenTally.merge(tokens) if tokens else None


def _merge_jobs(parts: Sequence[Tally]) -> JobTally | None:
    """The parts' job figures merged; None when no part ran jobs."""
    jobs = [p.jobs for p in parts if p.jobs is not None]
    return JobTally.merge(jobs) if jobs else None


def _merge_messages(parts: Sequence[Tally]) -> dict[str, tuple[str, ...]]:
    """Per kind, the first few distinct messages over every part, in part order."""
    merged: dict[str, list[str]] = {}
    for p in parts:
        for kind, messages in p.error_messages.items():
            kept = merged.setdefault(kind, [])
            kept += [m for m in messages if m not in kept][:max(MAX_DETAILS - len(kept), 0)]
    return {k: tuple(v) for k, v in merged.items()}
