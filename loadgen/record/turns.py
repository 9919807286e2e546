"""Per-turn figures of multi-turn sessions: TTFT and TPOT by turn index, mergeable.

A finished stream of turn k (`TokenStream.turn`) files its TTFT (from its own
scheduled time: the previous answer's end plus the think time) and its TPOT
under k. `TURN_METRICS` names the histograms kept per turn; `merge_turns` adds
the tallies of several load processes exactly.
"""

from __future__ import annotations

from collections.abc import Iterable

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.record.histograms import Recorder, merge

__all__ = ["TURN_METRICS", "TurnHistograms", "TurnRecorder", "merge_turns"]

TURN_METRICS = ("ttft_ns", "tpot_ns")

TurnHistograms = dict[int, dict[str, HdrHistogram]]


class TurnRecorder:
    """The measured streams' TTFT and TPOT, by turn index (1, 2, ...)."""

    def __init__(self) -> None:
        self.by_turn: dict[int, dict[str, Recorder]] = {}

    def add(self, turn: int, ttft_ns: int, tpot_ns: int | None) -> None:
        """One finished stream of `turn`; `tpot_ns` None for a one-token answer."""
        recorders = self.by_turn.get(turn)
        if recorders is None:
            recorders = self.by_turn[turn] = {k: Recorder() for k in TURN_METRICS}
        recorders["ttft_ns"].add(ttft_ns)
        if tpot_ns is not None:
            recorders["tpot_ns"].add(tpot_ns)

    def histograms(self) -> TurnHistograms:
        """Every turn's histograms (buffers flushed)."""
        return {turn: {k: r.histogram for k, r in recorders.items()}
                for turn, recorders in sorted(self.by_turn.items())}


def merge_turns(parts: Iterable[TurnHistograms]) -> TurnHistograms:
    """One set of per-turn histograms holding every part's counts."""
    parts = list(parts)
    turns = sorted({turn for part in parts for turn in part})
    return {turn: {k: merge(p[turn][k] for p in parts if turn in p) for k in TURN_METRICS}
            for turn in turns}
