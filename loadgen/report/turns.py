"""The per-turn figures of multi-turn sessions (result.json `turns`) as report rows.

One row per turn index: how many turns of that index finished, and the p50 and p99 of their
TTFT (each from the turn's own scheduled time) and TPOT, in ms; a TPOT with no answer of two
tokens or more is left blank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TURN_COLUMNS", "turn_rows"]

TURN_COLUMNS = ("turn", "n", "TTFT p50 (ms)", "TTFT p99 (ms)", "TPOT p50 (ms)",
                "TPOT p99 (ms)")


def _ms(summary: Mapping[str, Any], pct: str) -> float | None:
    return summary[pct] / 1e6 if summary.get("count") else None


def turn_rows(turns: Mapping[str, Mapping[str, Any]]) -> list[dict[str, object]]:
    """The rows of `turns` (result.json's, keyed by turn index), in turn order."""
    rows: list[dict[str, object]] = []
    for turn, figures in sorted(turns.items(), key=lambda item: int(item[0])):
        row: dict[str, object] = {"turn": int(turn), "n": figures["count"]}
        for metric, name in (("ttft_ns", "TTFT"), ("tpot_ns", "TPOT")):
            for pct in ("p50", "p99"):
                row[f"{name} {pct} (ms)"] = _ms(figures[metric], pct)
        rows.append(row)
    return rows
