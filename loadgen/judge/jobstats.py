"""Agentic jobs' figures of record: counts, job times, and the deadline's verdict.

A measured job misses its deadline when it ended over `job_deadline_ms`, failed, or never
finished. Attainment is judged with the requests' own rule (`judge.early_stopping`): the
jobs pass when, at `target_latency_percentile` with 99% confidence, the misses are few
enough for their number (MLPerf's binomial bound; at p99, 459 jobs with none missed).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from loadgen.judge import early_stopping
from loadgen.record.histograms import summary_ns
from loadgen.record.jobs import JobTally

__all__ = ["JobStats", "summarize_jobs"]


@dataclass(frozen=True, slots=True)
class JobStats:
    """result.json's `jobs`."""

    count: int  # measured jobs started
    finished: int
    failed: int
    unfinished: int
    deadline_ms: float | None  # None: no deadline set
    attained: int | None  # finished within the deadline
    attainment: float | None  # attained / count
    time_ns: dict[str, int]  # finished jobs' end-to-end times: p50, p99, ...
    early_stopping: dict[str, Any] | None  # with a deadline: the bound's figures

    @property
    def passes(self) -> bool | None:
        """Whether the jobs meet the deadline (None without one)."""
        return None if self.early_stopping is None else bool(self.early_stopping["passes"])

    def as_dict(self) -> dict[str, Any]:
        """Plain values."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any] | None) -> JobStats | None:
        """Read back `as_dict` (None for a result without jobs)."""
        if doc is None:
            return None
        values: dict[str, Any] = {f.name: doc.get(f.name) for f in dataclasses.fields(cls)}
        return cls(**values)


def summarize_jobs(t: JobTally, percentile: float) -> JobStats:
    """The figures of a job tally, judged at `percentile` when it has a deadline."""
    c = t.counters
    count, finished, failed = c["started"], c["finished"], c["failed"]
    judged: dict[str, Any] | None = None
    attained = None
    if t.deadline_ns:
        attained = finished - c["over_deadline"]
        missed = count - attained
        judged = {"percentile": percentile, "confidence": 0.99, "jobs": count,
                  "missed": missed,
                  "max_missed_allowed": early_stopping.max_overlatency(count, percentile),
                  "min_jobs_needed": early_stopping.min_queries(percentile, missed),
                  "passes": early_stopping.passes(count, missed, percentile)}
    return JobStats(count, finished, failed, count - finished - failed,
                    t.deadline_ns / 1e6 if t.deadline_ns else None, attained,
                    None if attained is None or not count else attained / count,
                    summary_ns(t.time_ns), judged)
