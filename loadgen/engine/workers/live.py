"""The driver's live view: every worker's latest report merged, read like a live Collector.

A run monitor (the Prometheus exporter) reads a run's live figures
(`record.watched.Watched`): a `Collector`'s counters and recorders in one process; with
several workers the driver hands it a `LiveView` instead, with the same names, updated
whenever a report arrives (the merge is exact: the reports share one HDR layout). Each
update replaces the figures whole; a scrape in between reads the previous ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.record.histograms import new_histogram
from loadgen.record.tally import HISTOGRAMS, Tally
from loadgen.record.tokens import TokenTally

__all__ = ["FixedRecorder", "LiveTokens", "LiveTurns", "LiveView"]


class FixedRecorder:
    """A recorder stand-in: a finished histogram, read through `histogram`."""

    def __init__(self, histogram: HdrHistogram) -> None:
        self.histogram = histogram


class LiveTokens:
    """A token run's merged figures, read like a live `TokenRecorder`."""

    def __init__(self, tokens: TokenTally) -> None:
        self.recorders = {k: FixedRecorder(h) for k, h in tokens.histograms.items()}
        self.counters = dict(tokens.counters)
        self.turns = LiveTurns(tokens)


class LiveTurns:
    """Multi-turn sessions' merged histograms by turn, read like a live `TurnRecorder`."""

    def __init__(self, tokens: TokenTally) -> None:
        self.by_turn = {turn: {k: FixedRecorder(h) for k, h in hists.items()}
                        for turn, hists in tokens.turns.items()}


class LiveView:
    """The counters and recorders a monitor reads, for the merged reports."""

    def __init__(self, name: str) -> None:
        self.name = name  # the SUT's, for labels
        self.update(None, (0, 0, 0, 0, 0))

    def update(self, tally: Tally | None, progress: Sequence[int]) -> None:
        """New merged figures (None: nothing reported yet) and the summed progress."""
        hist = tally.histograms if tally is not None else {k: new_histogram() for k in HISTOGRAMS}
        self.latency = FixedRecorder(hist["latency_ns"])
        self.service_latency = FixedRecorder(hist["service_latency_ns"])
        self.issue_lag = FixedRecorder(hist["issue_lag_ns"])
        self.query_latency = FixedRecorder(hist["query_latency_ns"])
        self.components = {k: FixedRecorder(h) for k, h in
                           (tally.components.items() if tally is not None else ())}
        self.errors_by_kind = dict(tally.errors_by_kind) if tally is not None else {}
        self.measured_queries = tally.queries if tally is not None else 0
        self.overlatency = tally.overlatency if tally is not None else 0
        self.tokens = LiveTokens(tally.tokens) if tally is not None and tally.tokens else None
        self.issued, self.finished, self.in_flight = progress[1], progress[2], progress[3]
