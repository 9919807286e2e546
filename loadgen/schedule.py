"""Arrival processes and the open-loop plan: pure functions of (settings, seed).

An arrival process is a small frozen value with one method,
`next_offsets(rng, after_ns, count)`, giving the next `count` arrival offsets
(float ns from the run's start) after `after_ns`. No clock, no asyncio, no
global random: the same seed gives the same schedule, chunk by chunk.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from loadgen.settings import TestSettings

__all__ = ["CHUNK", "ArrivalProcess", "Constant", "Poisson", "arrival_for", "open_loop_offsets"]

CHUNK = 8192  # queries planned at a time: small, so building one never stalls issuing
_NS = 1e9


class ArrivalProcess(Protocol):
    """Gives arrival offsets in float ns, strictly after `after_ns`."""

    def next_offsets(self, rng: np.random.Generator, after_ns: float, count: int) -> np.ndarray:
        """The next `count` offsets, ascending."""
        ...


@dataclass(frozen=True, slots=True)
class Poisson:
    """Exponential inter-arrivals at `rate_qps` (MLPerf Server)."""

    rate_qps: float

    def next_offsets(self, rng: np.random.Generator, after_ns: float, count: int) -> np.ndarray:
        return after_ns + np.cumsum(rng.exponential(_NS / self.rate_qps, count))


@dataclass(frozen=True, slots=True)
class Constant:
    """A fixed period of 1 / `rate_qps`."""

    rate_qps: float

    def next_offsets(self, rng: np.random.Generator, after_ns: float, count: int) -> np.ndarray:
        return after_ns + (_NS / self.rate_qps) * np.arange(1, count + 1, dtype=np.float64)


def arrival_for(settings: TestSettings) -> ArrivalProcess:
    """The arrival process a test definition asks for (open loop only)."""
    if settings.arrival == "constant":
        return Constant(settings.target_qps)
    return Poisson(settings.target_qps)


def open_loop_offsets(
    process: ArrivalProcess, settings: TestSettings, chunk: int = CHUNK
) -> Iterator[np.ndarray]:
    """Chunks of int64 ns offsets covering warm-up plus the measured window.

    Issuing stops at the first arrival that satisfies both minimums (measured
    duration and measured query count), or earlier at either maximum.
    """
    rng = np.random.default_rng(settings.schedule_rng_seed)
    warmup_ns = settings.warmup_s * _NS
    min_end_ns = warmup_ns + settings.min_duration_s * _NS
    max_end_ns = warmup_ns + settings.max_duration_s * _NS if settings.max_duration_s else np.inf
    max_count = settings.max_query_count or np.iinfo(np.int64).max
    measured = 0
    after = 0.0
    while True:
        offsets = process.next_offsets(rng, after, chunk)
        after = float(offsets[-1])
        in_window = offsets >= warmup_ns
        counts = measured + np.cumsum(in_window)
        enough = (offsets >= min_end_ns) & (counts >= settings.min_query_count)
        capped = (offsets > max_end_ns) | (counts > max_count)
        stop_at = _first(enough, inclusive=True, other=_first(capped, inclusive=False))
        if stop_at is not None:
            yield np.round(offsets[:stop_at]).astype(np.int64)
            return
        measured = int(counts[-1])
        yield np.round(offsets).astype(np.int64)


def _first(mask: np.ndarray, inclusive: bool, other: int | None = None) -> int | None:
    """Length of the prefix ending at the first True in `mask` (or `other`, if earlier)."""
    hits = np.flatnonzero(mask)
    here = None if hits.size == 0 else int(hits[0]) + (1 if inclusive else 0)
    candidates = [c for c in (here, other) if c is not None]
    return min(candidates) if candidates else None
