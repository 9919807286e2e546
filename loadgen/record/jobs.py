"""Agentic jobs' figures: how many started, finished and failed, each finished job's
end-to-end time, and how many missed the deadline; exactly mergeable.

A job's time runs from its scheduled start (its arrival on the plan) to its last request's
end, so a late step stays in it (no coordinated omission). Only jobs that arrive in the
measured window are filed. A job over `deadline_ns`, failed, or never finished misses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.record.histograms import (
    HistText,
    Recorder,
    decode,
    encode,
    merge,
    new_histogram,
    written,
)

__all__ = ["JOB_COUNTERS", "JobRecorder", "JobTally"]

JOB_COUNTERS = ("started", "finished", "failed", "over_deadline")


@dataclass(frozen=True, slots=True)
class JobTally:
    """A run's job figures in mergeable form."""

    deadline_ns: int  # 0 = none
    counters: dict[str, int]  # keyed by JOB_COUNTERS
    time_ns: HdrHistogram  # each finished job's end-to-end time

    def encode(self, text: HistText = encode) -> dict[str, Any]:
        """Plain values (the histogram as `text`, V2 by default; None when empty)."""
        return {"deadline_ns": self.deadline_ns, "counters": dict(self.counters),
                "time_ns": written(self.time_ns, text)}

    @classmethod
    def decode(cls, doc: dict[str, Any]) -> JobTally:
        """The inverse of `encode`."""
        blob = doc.get("time_ns")
        return cls(int(doc["deadline_ns"]),
                   {k: int(doc["counters"].get(k, 0)) for k in JOB_COUNTERS},
                   new_histogram() if blob is None else decode(blob))

    @classmethod
    def merge(cls, parts: Sequence[JobTally]) -> JobTally:
        """One tally holding every part's counts."""
        return cls(parts[0].deadline_ns,
                   {k: sum(p.counters[k] for p in parts) for k in JOB_COUNTERS},
                   merge(p.time_ns for p in parts))


class JobRecorder:
    """Files each measured job as it starts and ends."""

    def __init__(self, deadline_ns: int = 0) -> None:
        self.deadline_ns = deadline_ns
        self.counters = dict.fromkeys(JOB_COUNTERS, 0)
        self.time = Recorder()

    def started(self) -> None:
        """A measured job's first step is due."""
        self.counters["started"] += 1

    def finished(self, time_ns: int) -> None:
        """A measured job's last request ended well, `time_ns` after its scheduled start."""
        self.counters["finished"] += 1
        self.time.add(time_ns)
        if self.deadline_ns and time_ns > self.deadline_ns:
            self.counters["over_deadline"] += 1

    def failed(self) -> None:
        """A request of a measured job failed: the job ends there."""
        self.counters["failed"] += 1

    def tally(self) -> JobTally:
        """The figures so far."""
        return JobTally(self.deadline_ns, dict(self.counters), self.time.histogram)
