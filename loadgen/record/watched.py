"""What a run monitor reads while a run goes: the SUT's name, counters and recorders.

A single process hands its monitors the SUT and the live `Collector`; the driver of
several workers hands them, for both, a `LiveView` of the workers' merged reports
(`engine.workers.live`). Each has these names, read-only here, so a monitor reads either
without knowing which it has. A recorder is read through `histogram` (a live one flushes
its buffer first).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

__all__ = ["Histogrammed", "Named", "Watched", "WatchedTokens", "WatchedTurns"]


class Named(Protocol):
    """What a monitor reads of the SUT: its name (for labels)."""

    @property
    def name(self) -> str:
        """The SUT's name."""


class Histogrammed(Protocol):
    """A recorder, read through its histogram."""

    @property
    def histogram(self) -> HdrHistogram:
        """The histogram so far."""


class WatchedTurns(Protocol):
    """Multi-turn sessions' recorders by turn index, then by metric (`record.turns`)."""

    @property
    def by_turn(self) -> Mapping[int, Mapping[str, Histogrammed]]:
        """Turn index -> metric -> recorder."""


class WatchedTokens(Protocol):
    """A token run's recorders and counters (`record.tokens`)."""

    @property
    def recorders(self) -> Mapping[str, Histogrammed]:
        """Token histogram name (`TOKEN_HISTOGRAMS`) -> recorder."""

    @property
    def counters(self) -> Mapping[str, int]:
        """Token counter name (`TOKEN_COUNTERS`) -> count."""

    @property
    def turns(self) -> WatchedTurns:
        """By turn, for multi-turn sessions."""


class Watched(Protocol):
    """The live figures of one run, as a monitor reads them."""

    @property
    def issued(self) -> int:
        """Queries handed to the SUT."""

    @property
    def finished(self) -> int:
        """Queries answered or failed."""

    @property
    def in_flight(self) -> int:
        """Queries issued and not yet done."""

    @property
    def measured_queries(self) -> int:
        """Answered queries in the measured window."""

    @property
    def overlatency(self) -> int:
        """Measured queries over the latency SLO."""

    @property
    def errors_by_kind(self) -> Mapping[str, int]:
        """Failed queries, by kind."""

    @property
    def latency(self) -> Histogrammed:
        """Sample latency from the scheduled time."""

    @property
    def service_latency(self) -> Histogrammed:
        """Query latency from the actual send."""

    @property
    def issue_lag(self) -> Histogrammed:
        """Actual send minus scheduled time."""

    @property
    def components(self) -> Mapping[str, Histogrammed]:
        """Component durations the SUT reported, by name."""

    @property
    def tokens(self) -> WatchedTokens | None:
        """A token run's figures (None otherwise)."""
