"""The completion sink: turns the runner's stamps into recorded latencies and counts.

The runner registers each query as it issues it (`issued`); the SUT reports it
back once (`done`, `streamed` for a token stream, or `failed`). Only queries scheduled inside the measured
window (after warm-up) are recorded, in the histograms and in the window of
their scheduled time (`windows.py`); all are counted for progress. When the run
ends, `tally` hands the figures over in a mergeable form.
"""

from __future__ import annotations

import collections
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.adapters.base import SampleTimes
from loadgen.adapters.safetext import safe_text
from loadgen.adapters.tokens import TokenStream
from loadgen.record.histograms import FLUSH_SLICE, Recorder
from loadgen.record.jobs import JobRecorder
from loadgen.record.querylog import QueryLog
from loadgen.record.tally import MAX_DETAILS, RunTimes, Tally
from loadgen.record.tokens import TokenRecorder
from loadgen.record.windows import WindowedRecorder, Windows

__all__ = ["BULK_SAMPLES", "DETAIL_CHARS", "MAX_ERROR_KINDS", "OUT_OF_MEMORY", "TIDY_AT", "Collector"]

MAX_ERROR_KINDS = 64
DETAIL_CHARS = 300  # a message is cut to this length
TIDY_AT = FLUSH_SLICE  # `tidy` records a slice of a buffer holding at least this many values
BULK_SAMPLES = 64  # a query with more per-sample finish times records them as one array
_OTHER = "other"
OUT_OF_MEMORY = "out_of_memory"
"""The error kind of a failure whose message says the SUT ran out of memory (CUDA's
`OutOfMemoryError`, "CUDA out of memory", a host `MemoryError`, an OOM-killed worker)."""
_OUT_OF_MEMORY = re.compile(r"out of memory|OutOfMemoryError|MemoryError|\bOOM\b",
                            re.IGNORECASE)


class Collector:
    """Per-run recording state; implements `CompletionSink`."""

    def __init__(
        self,
        slo_ns: int,
        query_timeout_ns: int = 0,
        keep_outputs: bool = False,
        on_finish: Callable[[int], None] | None = None,
        log: QueryLog | None = None,
        windows: Windows | None = None,
        tokens: TokenRecorder | None = None,
        jobs: JobRecorder | None = None,
    ) -> None:
        self.slo_ns = slo_ns
        self.query_timeout_ns = query_timeout_ns
        self.latency = Recorder()
        self.service_latency = Recorder()
        self.issue_lag = Recorder()
        self.windows = windows if windows is not None else Windows(1_000_000_000, slo_ns)
        self.query_latency = WindowedRecorder(self.windows)  # also fills the windows
        self.components: dict[str, Recorder] = {}
        self._recorders = [self.latency, self.service_latency, self.issue_lag,
                           self.query_latency]  # and each component's, as it appears
        self.batch_sizes: collections.Counter[int] = collections.Counter()
        self.errors_by_kind: collections.Counter[str] = collections.Counter()
        self.error_messages: dict[str, list[str]] = {}
        self.outputs: dict[int, Any] | None = {} if keep_outputs else None
        self.issued = 0
        self.finished = 0
        self.measured_queries = 0
        self.measured_samples = 0
        self.overlatency = 0
        self.late = 0
        self.last_done_ns = 0
        self.on_finish = on_finish
        self.on_end: Callable[[int, int, bool], None] | None = None
        """Sees each query leave flight: (query id, done stamp, finished well); multi-turn
        sessions send their next turns from it."""
        self.log = log
        self.jobs = jobs
        """Agentic jobs' figures (`session_file`), filed by `engine.jobs`."""
        self.tokens: TokenRecorder | None = None  # made by the first stream, if not given
        if tokens is not None:
            self._use_tokens(tokens)
        self._inflight: dict[int, tuple[int, int, int, bool]] = {}
        self._deadlines: collections.deque[tuple[int, int]] = collections.deque()

    def started(self, t0_ns: int, measure_start_ns: int) -> None:
        """The runner's clock origin and the start of the measured window."""
        if self.log is not None:
            self.log.origin_ns = t0_ns
        self.windows.started(t0_ns, measure_start_ns)

    @property
    def in_flight(self) -> int:
        """Queries issued and not yet done, failed or expired."""
        return len(self._inflight)

    def issued_query(self, query_id: int, scheduled_ns: int, sent_ns: int, samples: int,
                     measured: bool) -> None:
        """Register a query the moment before it is handed to the SUT."""
        self._inflight[query_id] = (scheduled_ns, sent_ns, samples, measured)
        self.issued += 1
        if measured:
            self.issue_lag.add(sent_ns - scheduled_ns)
        if self.query_timeout_ns:
            self._deadlines.append((scheduled_ns + self.query_timeout_ns, query_id))

    def done(
        self,
        query_id: int,
        done_ns: int,
        components: Mapping[str, int] | None = None,
        sample_done_ns: SampleTimes | None = None,
        output: Any = None,
    ) -> None:
        entry = self._inflight.pop(query_id, None)
        if entry is None:
            self.late += 1
            return
        self._completed(query_id, entry, done_ns, components, sample_done_ns, output)

    def streamed(self, query_id: int, done_ns: int, stream: TokenStream,
                 components: Mapping[str, int] | None = None, output: Any = None) -> None:
        """A token stream ended well at `done_ns`: the query is done, its tokens recorded."""
        entry = self._inflight.pop(query_id, None)
        if entry is None:
            self.late += 1
            return
        if stream.sent_ns is not None:
            entry = _on_the_wire(entry, stream.sent_ns)
        if entry[3]:
            self._token_recorder().streamed(entry[0], entry[1], stream)
        if self.log is not None:
            ttft = stream.chunk_ns[0] - entry[0] if stream.chunk_ns else -1
            self.log.add(query_id, entry[0], entry[1], done_ns, "ok", ttft, stream.output_tokens)
        self._completed(query_id, entry, done_ns, components, None, output, logged=True)

    def sample_streamed(self, query_id: int, stream: TokenStream) -> None:
        """One sample's stream of a query of several (Offline) ended well; the query itself
        still ends with `done` or `failed`."""
        entry = self._inflight.get(query_id)
        if entry is not None and entry[3]:
            sent = entry[1] if stream.sent_ns is None else max(entry[1], stream.sent_ns)
            self._token_recorder().streamed(entry[0], sent, stream)

    def _completed(self, query_id: int, entry: tuple[int, int, int, bool], done_ns: int,
                   components: Mapping[str, int] | None, sample_done_ns: SampleTimes | None,
                   output: Any, logged: bool = False) -> None:
        scheduled_ns, sent_ns, samples, measured = entry
        self.finished += 1
        if self.log is not None and not logged:
            self.log.add(query_id, scheduled_ns, sent_ns, done_ns)
        if measured:
            latency = done_ns - scheduled_ns
            self.measured_queries += 1
            self.measured_samples += samples
            self.query_latency.add_at(scheduled_ns, latency)
            if sample_done_ns is None:
                self.latency.add(latency)
            elif len(sample_done_ns) > BULK_SAMPLES:  # an Offline query: one array operation
                self.latency.add_array(np.asarray(sample_done_ns, dtype=np.int64) - scheduled_ns)
            else:
                for t in sample_done_ns:
                    self.latency.add(t - scheduled_ns)
            self.service_latency.add(done_ns - sent_ns)
            if latency > self.slo_ns:
                self.overlatency += 1
            if done_ns > self.last_done_ns:  # noqa: PLR1730 - per query: a compare, not a call
                self.last_done_ns = done_ns
            if components:
                self._components(components)
            if self.outputs is not None:
                self.outputs[query_id] = output
        if self.on_end is not None:
            self.on_end(query_id, done_ns, True)
        if self.on_finish is not None:
            self.on_finish(done_ns)

    def failed(self, query_id: int, done_ns: int, kind: str, detail: str | None = None,
               stream: TokenStream | None = None) -> None:
        """The query failed; a token stream's partial timings are kept (it still counts as
        an error)."""
        entry = self._inflight.pop(query_id, None)
        if entry is None:
            self.late += 1
            return
        if stream is not None and stream.sent_ns is not None:
            entry = _on_the_wire(entry, stream.sent_ns)
        kind, detail = safe_text(kind), None if detail is None else safe_text(detail)
        self.finished += 1
        if entry[3] and (stream is not None or self.tokens is not None):
            self._token_recorder().failed(entry[0], entry[1], stream)
        if self.log is not None:
            self.log.add(query_id, entry[0], entry[1], done_ns, kind)
        self._count_error(kind, detail)
        if entry[3]:
            self.windows.error(entry[0])
        if self.on_end is not None:
            self.on_end(query_id, done_ns, False)
        if self.on_finish is not None:
            self.on_finish(done_ns)

    def expire(self, now_ns: int) -> None:
        """Fail every in-flight query whose `query_timeout_ms` has passed."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][0] <= now_ns:
            _, query_id = deadlines.popleft()
            if query_id in self._inflight:
                self.failed(query_id, now_ns, "timeout",
                            f"no answer within query_timeout_ms {self.query_timeout_ns / 1e6:g}")

    def abandon(self, now_ns: int, kind: str = "unfinished",
                detail: str = "still in flight when the drain timeout ran out") -> int:
        """Fail whatever is still in flight (drain ran out); returns how many."""
        left = list(self._inflight)
        for query_id in left:
            self.failed(query_id, now_ns, kind, detail)
        return len(left)

    def tidy(self) -> bool:
        """Record a slice of the fullest buffer if it holds at least `TIDY_AT` values.

        The engine calls this when it has slack before the next issue time, so
        buffers seldom fill up and flush on the spot; False if none needed it.
        """
        fullest, most = None, TIDY_AT - 1
        for recorder in self._recorders:
            if recorder.pending > most:
                fullest, most = recorder, recorder.pending
        log = self.log
        if log is not None and log.pending > most:
            log.flush()
            return True
        if fullest is None:
            return False
        fullest.flush_some()
        return True

    def tally(self, times: RunTimes, flush: bool = True) -> Tally:
        """The run's figures, once it has ended at `times`.

        `flush=False` (a load worker's interim report) leaves the buffers as they are:
        their values reach the histograms and windows in the engine's own small slices and
        show in a later report, so a report never records tens of thousands of values at
        once on the issue loop; the counters are exact either way.
        """
        def hist(r: Recorder) -> HdrHistogram:
            return r.histogram if flush else r.recorded_histogram

        if flush:
            self.query_latency.flush()  # fills the windows
        return Tally(
            histograms={"latency_ns": hist(self.latency),
                        "service_latency_ns": hist(self.service_latency),
                        "issue_lag_ns": hist(self.issue_lag),
                        "query_latency_ns": hist(self.query_latency)},
            components={name: hist(r) for name, r in sorted(self.components.items())},
            batch_sizes=dict(sorted(self.batch_sizes.items())),
            errors_by_kind=dict(self.errors_by_kind),
            error_messages={k: tuple(v) for k, v in self.error_messages.items()},
            queries=self.measured_queries,
            samples=self.measured_samples,
            overlatency=self.overlatency,
            late=self.late,
            out_of_range=sum(r.out_of_range if flush else r.recorded_out_of_range
                             for r in self._recorders),
            last_done_ns=self.last_done_ns,
            windows=self.windows.counts(),
            times=times,
            tokens=None if self.tokens is None else self.tokens.tally(),
            jobs=None if self.jobs is None else self.jobs.tally(),
        )

    def _use_tokens(self, tokens: TokenRecorder) -> None:
        self.tokens = tokens
        self._recorders.extend(tokens.recorders.values())

    def _token_recorder(self) -> TokenRecorder:
        """The token recorder, made on first use when the run did not ask for one."""
        if self.tokens is None:
            self._use_tokens(TokenRecorder())
        assert self.tokens is not None
        return self.tokens

    def _components(self, components: Mapping[str, int]) -> None:
        for name, value in components.items():
            if name == "batch_size":
                self.batch_sizes[int(value)] += 1
                continue
            recorder = self.components.get(name)
            if recorder is None:
                recorder = self.components[name] = Recorder()
                self._recorders.append(recorder)
            recorder.add(int(value))

    def _count_error(self, kind: str, detail: str | None) -> None:
        if detail and _OUT_OF_MEMORY.search(detail):  # its own kind, whoever reported it
            kind = OUT_OF_MEMORY
        if kind not in self.errors_by_kind and len(self.errors_by_kind) >= MAX_ERROR_KINDS:
            kind = _OTHER
        self.errors_by_kind[kind] += 1
        if detail:
            kept = self.error_messages.setdefault(kind, [])
            message = detail[:DETAIL_CHARS]
            if len(kept) < MAX_DETAILS and message not in kept:
                kept.append(message)


def _on_the_wire(entry: tuple[int, int, int, bool], sent_ns: int) -> tuple[int, int, int, bool]:
    """An in-flight entry whose send stamp is when its request went on the wire (it waited
    for a free connection first): the wait stays in the from-schedule view only."""
    scheduled_ns, issued_ns, samples, measured = entry
    return scheduled_ns, max(issued_ns, sent_ns), samples, measured
