"""The null SUT: completes every query at once, inside `issue`.

It measures the harness alone: whatever latency a run against it shows is the
load generator's own cost.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from loadgen.adapters.base import CompletionSink, Timers

__all__ = ["NullSut"]


class NullSut:
    """Answers each query immediately, with no output."""

    name = "null"

    def __init__(self) -> None:
        self._sink: CompletionSink | None = None

    async def start(self, sink: CompletionSink, timers: Timers) -> None:
        self._sink = sink

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        assert self._sink is not None, "issue before start"
        self._sink.done(query_id, time.perf_counter_ns())

    async def stop(self) -> None:
        self._sink = None

    def describe(self) -> dict[str, Any]:
        return {"sut": "null"}
