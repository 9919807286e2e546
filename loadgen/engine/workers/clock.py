"""A worker's clock offset from the driver's, measured by pings (Cristian / NTP style).

The driver stamps its clock before and after asking a worker for its own;
the worker's reading was taken somewhere in that round trip, so the offset
estimate (worker minus driver, at the midpoint) is off by at most half of it.
Of several pings the one with the shortest round trip is kept.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["PINGS", "ClockReading", "measure_offset", "skew_bound_ns"]

PINGS = 16


@dataclass(frozen=True, slots=True)
class ClockReading:
    """Worker clock minus driver clock, within +-error_ns (half the kept round trip)."""

    offset_ns: int
    error_ns: int
    rtt_ns: int


def measure_offset(ping: Callable[[], int], pings: int = PINGS,
                   clock: Callable[[], int] = time.perf_counter_ns) -> ClockReading:
    """Ping `pings` times (`ping` returns the worker's clock now); keep the shortest trip."""
    best: tuple[int, int] | None = None
    for _ in range(pings):
        sent = clock()
        theirs = ping()
        back = clock()
        rtt = back - sent
        if best is None or rtt < best[0]:
            best = (rtt, theirs - (sent + back) // 2)
    assert best is not None, "at least one ping"
    rtt, offset = best
    return ClockReading(offset, (rtt + 1) // 2, rtt)


def skew_bound_ns(uncertainties_ns: Sequence[int]) -> int:
    """How far apart any two workers' schedules can be: the two largest uncertainties.

    A worker's uncertainty is how far its schedule's origin may sit from the
    driver's (offset error, drift over the run, lateness to start); one worker
    alone is bounded against the driver's plan.
    """
    top = sorted((abs(u) for u in uncertainties_ns), reverse=True)[:2]
    return sum(top)
