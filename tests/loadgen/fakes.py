"""A SUT built from a plain function, and the last word of a worker that issued nothing,
for engine tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from loadgen.engine.workers.base import DONE
from loadgen.plan.plan import RunPlan
from loadgen.record.collect import Collector
from loadgen.record.tally import RunTimes

# respond(query_id, sample_indices, now_ns) -> per-sample delays in ns, or None (never answer)
Respond = Callable[[int, np.ndarray, int], "list[int] | None"]


class FunctionSut:
    """Answers each sample after the delays `respond` returns, via the engine's timers."""

    name = "fake"

    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.issued: list[tuple[int, int, int]] = []  # (query_id, samples, issue time)
        self.in_flight = 0
        self.max_in_flight = 0

    async def start(self, sink: Any, timers: Any) -> None:
        self.sink, self.timers = sink, timers

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        now = time.perf_counter_ns()
        self.issued.append((query_id, len(sample_indices), now))
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        delays = self.respond(query_id, sample_indices, now)
        if delays is None:
            return
        sample_done = [now + d for d in delays]
        done = max(sample_done)

        def complete() -> None:
            self.in_flight -= 1
            self.sink.done(query_id, done, sample_done_ns=sample_done if len(delays) > 1 else None)

        self.timers.call_at_ns(done, complete)

    async def stop(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"sut": "fake"}


def empty_done(plan: RunPlan, start_ns: int) -> tuple[str, dict[str, object]]:
    """The DONE message of a fake worker that issued nothing: an empty tally over the plan's
    warm-up from `start_ns`, then a measured window as long."""
    warm = plan.warmup_ns
    times = RunTimes(start_ns, start_ns + warm, start_ns + 2 * warm, start_ns + 2 * warm,
                     False, 0)
    tally = Collector(10**7).tally(times)
    return (DONE, {"tally": tally.encode(), "issued": 0, "cpu_s": 0.0, "late_ns": 0,
                   "progress": [0, 0, 0, 0, 0]})
