"""A run's progress snapshot: what the engine hands its progress callback, what live views read."""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.record.glance import Glance

__all__ = ["Progress"]


@dataclass(frozen=True, slots=True)
class Progress:
    """A snapshot for progress lines on long runs."""

    elapsed_ns: int
    issued: int
    finished: int
    in_flight: int
    errors: int
    glance: Glance | None = None  # running latency, issue lag and errors by kind
