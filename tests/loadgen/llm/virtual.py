"""Drive `llmsim` in virtual time: a clock the test sets and timers it fires in order."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Iterable

import numpy as np

from loadgen.adapters.llmsim import CostModel, LlmSimSut
from loadgen.record.collect import Collector


class VirtualTime:
    """`Timers` plus the clock: `run_until(t)` fires every timer due by t, in order."""

    def __init__(self) -> None:
        self.now = 0
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def clock(self) -> int:
        return self.now

    def call_at_ns(self, when_ns: int, callback: Callable[[], None]) -> None:
        heapq.heappush(self._heap, (when_ns, next(self._seq), callback))

    def run_until(self, t: int | None = None) -> None:
        while self._heap and (t is None or self._heap[0][0] < t):
            when, _, callback = heapq.heappop(self._heap)
            self.now = max(self.now, when)
            callback()
        if t is not None:
            self.now = max(self.now, t)


def drive(model: CostModel, arrivals: Iterable[tuple[int, int]], input_tokens: int,
          output_tokens: int, collector: Collector | None = None) -> tuple[Collector, LlmSimSut]:
    """Issue each (time, samples) query at its time, measured, and run to the end."""
    vt = VirtualTime()
    sut = LlmSimSut(model, input_tokens, output_tokens, clock=vt.clock)
    c = collector or Collector(slo_ns=2**62)
    asyncio.run(sut.start(c, vt))
    for query_id, (at, samples) in enumerate(arrivals):
        vt.run_until(at)
        c.issued_query(query_id, at, at, samples, True)
        sut.issue(query_id, np.zeros(samples, dtype=np.int64))
    vt.run_until()
    return c, sut
