"""Multi-turn sessions: how many turns a session has and how long its user thinks.

`turns` is a token length (`plan.lengths`: a number or a distribution table) read as a
count of turns (or, with `dataset_turns`, each ShareGPT conversation's own human turns); `think_time_ms` a number of milliseconds (0 allowed) or a length table
in whole milliseconds. A run with `turns` starts each session at an arrival of the plan
(open loop) and sends each later turn a think time after the previous answer ended
(`engine.conversations`). `SessionDraws` hands out the draws in order, seeded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.plan.lengths import LengthDist, parse_length

__all__ = ["SessionDraws", "SessionShape", "check_turns", "parse_think_time", "session_shape",
           "think_time_dict"]

_BATCH = 4096


def parse_think_time(value: Any, problems: list[str]) -> float | LengthDist:
    """`think_time_ms`: milliseconds (a number, not negative) or a length table (whole ms)."""
    if isinstance(value, LengthDist):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value) or value < 0:
            problems.append(f"think_time_ms: must be a number of ms, not negative, got {value!r}")
            return 0.0
        return float(value)
    if isinstance(value, dict):
        dist = parse_length("think_time_ms", value, problems)
        return 0.0 if dist is None else dist
    problems.append(f"think_time_ms: expected milliseconds or a table like "
                    f'{{dist = "uniform", min = 500, max = 3000}}, got {value!r}')
    return 0.0


def think_time_dict(value: float | LengthDist) -> Any:
    """The form `think_time_ms` is recorded in (result.json's settings)."""
    return value.as_dict() if isinstance(value, LengthDist) else value


@dataclass(frozen=True, slots=True)
class SessionShape:
    """The turns per session and the think time between them."""

    turns: LengthDist | None  # None: each conversation's own (`dataset_turns`)
    think_time_ms: float | LengthDist
    seed: int

    def as_dict(self) -> dict[str, Any]:
        """Plain values for the plan's record."""
        return {"turns": "dataset" if self.turns is None else self.turns.as_dict(),
                "think_time_ms": think_time_dict(self.think_time_ms)}


def session_shape(settings: Any) -> SessionShape | None:
    """The run's sessions, or None for single requests (`turns` unset or fixed at 1, and
    no `dataset_turns`)."""
    if getattr(settings, "dataset_turns", False):
        return SessionShape(None, settings.think_time_ms, settings.workload_rng_seed)
    turns = getattr(settings, "turns", None)
    if turns is None or (turns.kind == "fixed" and turns.mean <= 1):
        return None
    return SessionShape(turns, settings.think_time_ms, settings.workload_rng_seed)


def check_turns(settings: Any, open_loop: bool, token_workload: bool,
                problems: list[str]) -> None:
    """Sessions need an open-loop run of single-sample queries over a token workload;
    `dataset_turns` a ShareGPT dataset and no `turns`."""
    if settings.dataset_turns and (settings.dataset_format != "sharegpt" or not settings.dataset):
        problems.append("dataset_turns: the conversations of a ShareGPT dataset are the "
                        "sessions; set dataset and dataset_format = \"sharegpt\"")
    if settings.dataset_turns and settings.turns is not None:
        problems.append("turns: with dataset_turns each conversation has its own turns; "
                        "set one or the other")
    if session_shape(settings) is None:
        if settings.think_time_ms:
            problems.append("think_time_ms: a think time comes between the turns of a session; "
                            "set turns (above 1)")
        return
    if not open_loop:
        problems.append("turns: multi-turn sessions start open loop (Server with an open-loop "
                        "arrival, such as poisson), not in this scenario")
    if not token_workload:
        problems.append("turns: multi-turn sessions need a token workload (input_tokens or "
                        "dataset)")
    if settings.samples_per_query != 1:
        problems.append("turns: multi-turn sessions need samples_per_query = 1")


class SessionDraws:
    """Each new session's turn count and each follow-up's think time, in the order asked
    (seeded: the same draws every run), drawn in batches off the issue path's way."""

    def __init__(self, shape: SessionShape) -> None:
        self.shape = shape
        self._turns_rng = np.random.default_rng((shape.seed, 6))
        self._think_rng = np.random.default_rng((shape.seed, 7))
        self._turns: list[int] = []
        self._thinks: list[int] = []

    def turns(self) -> int:
        """Turns of the next session."""
        assert self.shape.turns is not None, "a dataset's conversations bring their turns"
        if not self._turns:
            self._turns = self.shape.turns.draw(self._turns_rng, _BATCH).tolist()[::-1]
        return self._turns.pop()

    def think_ns(self) -> int:
        """The think time before the next follow-up turn."""
        think = self.shape.think_time_ms
        if not isinstance(think, LengthDist):
            return round(think * 1_000_000)
        if not self._thinks:
            self._thinks = (think.draw(self._think_rng, _BATCH) * 1_000_000).tolist()[::-1]
        return self._thinks.pop()
