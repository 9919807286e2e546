"""The per-turn figures of multi-turn sessions (result.json `turns`) as report rows.

One row per turn index: how many turns of that index finished, and the p50 and p99 of their
TTFT (each from the turn's own scheduled time) and TPOT, in ms; a TPOT with no answer of two
tokens or more is left blank.
"""

from __future__ import annotations

from collections.abc import Mapping

from loadgen.judge.summaries import LatencySummary
from loadgen.judge.tokenstats import TurnFigures

__all__ = ["TURN_COLUMNS", "turn_rows"]

TURN_COLUMNS = ("turn", "n", "TTFT p50 (ms)", "TTFT p99 (ms)", "TPOT p50 (ms)",
                "TPOT p99 (ms)")


def _ms(summary: LatencySummary, value: int) -> float | None:
    return value / 1e6 if summary.count else None


def turn_rows(turns: Mapping[str, TurnFigures]) -> list[dict[str, object]]:
    """The rows of `turns` (the token figures', keyed by turn index), in turn order."""
    rows: list[dict[str, object]] = []
    for turn, figures in sorted(turns.items(), key=lambda item: int(item[0])):
        row: dict[str, object] = {"turn": int(turn), "n": figures.count}
        for summary, name in ((figures.ttft_ns, "TTFT"), (figures.tpot_ns, "TPOT")):
            row[f"{name} p50 (ms)"] = _ms(summary, summary.p50)
            row[f"{name} p99 (ms)"] = _ms(summary, summary.p99)
        rows.append(row)
    return rows
