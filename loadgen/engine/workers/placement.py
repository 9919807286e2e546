"""Where the driver and each load process run: cores from `worker_cpus`, as MLCommons'
Endpoints client pins its workers, leaving the other cores to a co-located server.

The driver takes the first core of the list, the load processes one each of the rest, in
turn (several to a core only when the list is short; a one-core list holds them all).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.plan.cpus import parse_cpus

__all__ = ["Pins", "pin_plan"]


@dataclass(frozen=True, slots=True)
class Pins:
    """The driver's cores and each load process's."""

    driver: list[int]
    workers: list[list[int]]


def pin_plan(cpus: str, count: int) -> Pins | None:
    """Cores for the driver and `count` processes from a list like `0-8` ('' = no pins)."""
    if not cpus:
        return None
    cores = parse_cpus(cpus)
    rest = cores[1:] or cores
    return Pins([cores[0]], [[rest[i % len(rest)]] for i in range(count)])
