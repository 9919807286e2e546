"""The seam between the engine and a system under test (SUT).

A SUT adapter receives queries through `issue` and reports each one back,
exactly once, through the `CompletionSink` it was given at `start`:

* `issue` must not block; it hands the query on and returns.
* Completion time is stamped where the work ends (a worker thread, a response
  callback) with `time.perf_counter_ns()`, and passed as `done_ns`.
* Sink methods must be called on the event loop's thread; from another thread
  use `loop.call_soon_threadsafe(sink.done, ...)` with the stamped time.
* `components` are durations in ns (never absolute times), keyed by name
  (for example ``queue``, ``compute``, ``network``), plus ``batch_size``.
* An adapter whose work runs in Python threads of this process sets
  `shares_gil = True`: the engine then waits for issue times with sleeps that
  release the GIL instead of spinning (issue lag ~50 us rather than ~1 us, but
  the SUT is not starved by the tool that measures it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from loadgen.errors import SutSpecError

__all__ = ["CompletionSink", "SampleTimes", "SystemUnderTest", "Timers", "parse_options"]

#: per-sample finish times of a query (ns): a list, or one int64 array (an Offline query)
SampleTimes = Sequence[int] | npt.NDArray[np.int64]


class CompletionSink(Protocol):
    """Where an adapter reports finished queries."""

    def done(
        self,
        query_id: int,
        done_ns: int,
        components: Mapping[str, int] | None = None,
        sample_done_ns: SampleTimes | None = None,
        output: Any = None,
    ) -> None:
        """The query succeeded; `sample_done_ns` gives per-sample finish times when known."""

    def failed(self, query_id: int, done_ns: int, kind: str, detail: str | None = None) -> None:
        """The query failed; `kind` is a short, bounded label such as ``http_503``, `detail`
        what a person needs to see why (a status line and body excerpt, an exception)."""


class Timers(Protocol):
    """Precise timers serviced by the engine's issue loop (asyncio timers are ~1 ms coarse)."""

    def call_at_ns(self, when_ns: int, callback: Callable[[], None]) -> None:
        """Run `callback` on the loop as soon as `perf_counter_ns()` reaches `when_ns`."""


class SystemUnderTest(Protocol):
    """What the engine drives; in-process, remote or simulated."""

    name: str

    async def start(self, sink: CompletionSink, timers: Timers) -> None:
        """Connect, load, warm; called once before the first query."""

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        """Hand on one query of one or more samples; must not block."""

    async def stop(self) -> None:
        """Release everything; queries still in flight may be abandoned."""

    def describe(self) -> dict[str, Any]:
        """Conditions for the result: model, device, precision, batch settings, endpoint."""


def parse_options(text: str) -> dict[str, str]:
    """The options of a `--sut` SPEC: 'a=1,b=x' -> {'a': '1', 'b': 'x'}; a bare word is an
    error naming it."""
    options: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise SutSpecError(f"{part!r}: expected key=value")
        options[key.strip()] = value.strip()
    return options
