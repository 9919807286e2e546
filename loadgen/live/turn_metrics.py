"""Prometheus series of multi-turn sessions: TTFT and TPOT histograms by turn index.

    loadgen_turn_ttft_seconds{turn}   TTFT of each turn, from its own scheduled time
    loadgen_turn_tpot_seconds{turn}   TPOT of each turn (answers of two tokens or more)

The `turn` label is bounded: turns 1 .. MAX_TURN_LABELS - 1 keep their own label, and every
later turn is folded into the last one, `"{MAX_TURN_LABELS}+"` (their counts added), so a run
of long sessions exports at most MAX_TURN_LABELS series per metric.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np
import numpy.typing as npt
from prometheus_client.core import HistogramMetricFamily, Metric

__all__ = ["MAX_TURN_LABELS", "TURN_HISTOGRAMS", "fold_turns", "turn_families", "turn_label"]

MAX_TURN_LABELS = 16
TURN_HISTOGRAMS = (  # exported name, per-turn recorder key, help
    ("loadgen_turn_ttft_seconds", "ttft_ns",
     "Time to first token by session turn, from the turn's scheduled time."),
    ("loadgen_turn_tpot_seconds", "tpot_ns", "Time per output token by session turn."),
)

Counts = npt.NDArray[np.uint64]
Buckets = Callable[[Counts], tuple[list[tuple[str, float]], float]]


def turn_label(turn: int) -> str:
    """The `turn` label of turn index `turn` (1, 2, ...; the last label gathers the rest)."""
    return str(turn) if turn < MAX_TURN_LABELS else f"{MAX_TURN_LABELS}+"


def _add(a: Counts, b: Counts) -> Counts:
    """Two prefixes of HDR counts arrays added (the shorter one padded with zeros)."""
    if a.size < b.size:
        a, b = b, a
    out = a.copy()
    out[:b.size] += b
    return out


def fold_turns(by_turn: Mapping[int, Mapping[str, Counts]]) -> dict[str, dict[str, Counts]]:
    """Each turn's counts by `turn_label`, the turns past the cap added into the last label."""
    out: dict[str, dict[str, Counts]] = {}
    for turn, counts in sorted(by_turn.items()):
        label = turn_label(turn)
        held = out.get(label)
        out[label] = dict(counts) if held is None else {
            key: _add(held[key], value) for key, value in counts.items()}
    return out


def turn_families(label_names: Sequence[str], labels: Sequence[str],
                  turns: Mapping[str, Mapping[str, Counts]], buckets: Buckets
                  ) -> Iterator[Metric]:
    """The per-turn histogram families (nothing for a run without sessions)."""
    if not turns:
        return
    for name, key, doc in TURN_HISTOGRAMS:
        family = HistogramMetricFamily(name, doc, labels=(*label_names, "turn"))
        for label, counts in turns.items():
            pairs, total_s = buckets(counts[key])
            family.add_metric([*labels, label], pairs, total_s)
        yield family
