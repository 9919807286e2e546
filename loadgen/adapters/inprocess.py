"""In-process adapter: drive the serving harness (`sut.service`) with no network between.

    builtin:MODEL[,key=value...]     sut.service.build_service(MODEL, {key: value})

A query of k samples is one request of k rows. A query larger than the
service's `max_batch_size` (Offline) is cut into chunks of at most that many
rows, with enough chunks in flight to fill every instance's ring; it completes
when the last chunk does, with per-sample finish times. Library index i is
dataset sample i mod `sample_count`, and every sample's tensors are read once at
start, so issuing costs a dict lookup (one sample) or one vectorised gather
(several), straight into a pinned block the service lends where it has one (CUDA):
the only host copy a sample makes on its way to the GPU. The gather reads a copy of the
samples in the blocks' dtypes (at bf16/fp16 a floating input is converted once, at
start: half the bytes, no cast per batch); on a GPU a large one is split over a few
threads (`sut.gather.Gatherer`, stopped with the adapter; on the CPU the workers have
every core, and the gather stays one call). Where the service put the dataset on the
GPU before the run (`start_from_device`), a query sends its sample indices instead (into
a pinned block lent for them), and the rows are gathered there.

Completions are stamped in the sut worker thread and queued for the loop; the
loop is woken once for all that are queued (one callback per batch, not one per
request); components are the service's timings plus `batch_size` (the
names of `oipwire.timing`, the same a remote run records), and `output` is the
predicted class per sample (labelled datasets) or the first output tensor.
Failures are reported with kind `overloaded`, `timeout` or `error`.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from loadgen.adapters.base import CompletionSink, Timers, parse_options
from loadgen.errors import SutError, SutSpecError
from oipwire.timing import BATCH_SIZE
from sut import errors as sut_errors
from sut.devicedata import SAMPLE_INDEX
from sut.gather import Gatherer
from sut.service import InferenceService, InferResult, build_service
from sut.staging import Lent

__all__ = ["InProcessSut"]

_PREFIX = "builtin:"
_REPORT = -1  # a claim (`InProcessSut._claim`): every chunk has ended, report the query


def _detail(exc: BaseException) -> str:
    """What a person reads about a failure: the exception's type and message."""
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _kind(exc: BaseException) -> str:
    if isinstance(exc, sut_errors.Overloaded):
        return "overloaded"
    if isinstance(exc, sut_errors.RequestTimeout):
        return "timeout"
    return "error"


class _Chunked:
    """A query cut into chunks: what has been sent, what has finished."""

    __slots__ = ("chunks", "failure", "last", "last_done", "lock", "outputs", "outstanding",
                 "reported", "rows", "sample_done", "sent")

    def __init__(self, indices: np.ndarray, rows: int) -> None:
        self.rows = rows
        self.chunks = [indices[i:i + rows] for i in range(0, len(indices), rows)]
        self.lock = threading.Lock()
        self.sent = self.outstanding = self.last_done = 0
        self.reported = False
        self.sample_done = np.zeros(len(indices), dtype=np.int64)  # filled a chunk at a time
        self.outputs: np.ndarray | None = None  # every sample's output, filled in place
        self.last: InferResult | None = None  # the chunk that ended last: its components
        self.failure: BaseException | None = None


class InProcessSut:
    """A `SystemUnderTest` over an `InferenceService` in this process."""

    shares_gil = True  # the service's threads need the GIL between torch ops

    def __init__(self, service: InferenceService, name: str = "builtin") -> None:
        self.name = name
        self._service = service
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sink: CompletionSink | None = None
        self._size = 0
        self._labelled = False
        self._window = 2
        self._block: dict[str, np.ndarray] = {}
        self._lendable: dict[str, np.ndarray] = {}  # `_block` in the lent blocks' dtypes
        self._gatherer: Gatherer | None = None
        self._indices = False  # the samples are on the device: send indices, not rows
        self._rows: list[dict[str, np.ndarray]] = []
        self._queued: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._queued_lock = threading.Lock()
        self._wake_pending = False

    @classmethod
    def from_spec(cls, spec: str) -> InProcessSut:
        """Build from `builtin:MODEL[,key=value...]`; SutSpecError names what is wrong."""
        if not spec.startswith(_PREFIX):
            raise SutSpecError(f"--sut {spec!r}: expected builtin:MODEL[,key=value...]")
        model, _, rest = spec[len(_PREFIX):].partition(",")
        try:
            options = parse_options(rest)
        except SutSpecError as exc:
            raise SutSpecError(f"--sut {spec!r}: {exc}") from None
        if not model:
            raise SutSpecError(f"--sut {spec!r}: no model named")
        try:
            return cls(build_service(model, options), name=f"{_PREFIX}{model}")
        except sut_errors.SutError as exc:
            raise SutSpecError(f"--sut {spec!r}: {exc}") from exc

    @property
    def sample_count(self) -> int:
        """Samples in the model's dataset (known once started)."""
        return self._size

    async def start(self, sink: CompletionSink, timers: Timers) -> None:
        """Start the service (load, warm up) and read every sample's tensors once."""
        self._loop, self._sink = asyncio.get_running_loop(), sink
        if not self._service.ready:
            try:
                await self._service.start(in_process=True)
            except sut_errors.SutError as exc:
                raise SutError(f"{self.name}: {exc}") from exc
        self._size = self._service.dataset_size
        info = self._service.describe()
        self._window = int(info.get("in_flight", info["workers"])) + int(info["workers"])
        every = np.arange(self._size, dtype=np.int64)
        self._labelled = self._service.labels(every[:1]) is not None
        self._indices = self._service.samples_on_device
        if self._indices:
            self._rows = [{SAMPLE_INDEX: every[i:i + 1]} for i in range(self._size)]
            return
        self._block = self._service.sample_inputs(every)
        self._lendable = self._service.lendable(self._block)
        on_gpu = any(str(d).startswith("cuda") for d in info["device"])
        self._gatherer = Gatherer(None if on_gpu else 0)  # on the CPU the cores are the workers'
        self._rows = [{k: v[i:i + 1] for k, v in self._block.items()} for i in range(self._size)]

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        """Submit the query's samples as one request (or chunks); never blocks."""
        count = len(sample_indices)
        try:
            if count > self._service.metadata.max_batch_size:
                self._issue_chunked(query_id, sample_indices)
                return
            lent = None
            if count == 1:
                inputs = self._rows[int(sample_indices[0]) % self._size]
            else:
                inputs, lent = self._gather(np.remainder(sample_indices, self._size))
            self._service.submit(inputs, partial(self._finished, query_id), lent=lent)
        except sut_errors.SutError as exc:
            assert self._loop is not None and self._sink is not None
            self._loop.call_soon(self._sink.failed, query_id, time.perf_counter_ns(), _kind(exc),
                                 _detail(exc))

    async def stop(self) -> None:
        """Stop the service; requests still queued fail, batches running finish."""
        await self._service.stop(drain=False)
        if self._gatherer is not None:
            self._gatherer.close()

    def describe(self) -> dict[str, Any]:
        """`sut` (this adapter's name), then the service's own description."""
        return {"sut": self.name, **self._service.describe()}

    def score(self, queries: Sequence[np.ndarray], outputs: Mapping[int, Any]) -> tuple[float, int]:
        """Accuracy over `queries` (query id = position); a missing output counts as wrong."""
        correct = total = 0
        for query_id, indices in enumerate(queries):
            truth = self._service.labels(np.remainder(indices, self._size))
            if truth is None:
                raise SutError(f"{self.name}: the dataset has no labels; accuracy cannot be scored")
            total += len(indices)
            predicted = outputs.get(query_id)
            if predicted is not None:
                correct += int(np.count_nonzero(np.asarray(predicted).reshape(-1) == truth))
        return (correct / total if total else 0.0), total

    def _gather(self, picked: np.ndarray) -> tuple[dict[str, np.ndarray], Lent | None]:
        """The samples' rows, gathered into a block the service lends (else a new array);
        their indices, when the samples are on the device."""
        if self._indices:
            lent = self._service.lend_indices(len(picked))
            if lent is None:
                return {SAMPLE_INDEX: picked.astype(np.int64, copy=False)}, None
            np.copyto(lent.arrays[SAMPLE_INDEX], picked)
            return lent.arrays, lent
        lent = self._service.lend(len(picked))
        if lent is None:
            return {k: v[picked] for k, v in self._block.items()}, None
        assert self._gatherer is not None  # made at start, as the blocks were
        for name, data in self._lendable.items():
            self._gatherer.take(data, picked, lent.arrays[name])
        return lent.arrays, lent

    # -- completions (sut threads) ----------------------------------------------------------

    def _post(self, method: Callable[..., None], *args: Any) -> None:
        """Queue `method(*args)` for the loop; wake it only if no wake-up is pending."""
        assert self._loop is not None
        with self._queued_lock:
            self._queued.append((method, args))
            if self._wake_pending:
                return
            self._wake_pending = True
        try:
            self._loop.call_soon_threadsafe(self._run_queued)
        except RuntimeError:  # the loop has closed: the run is over
            pass

    def _run_queued(self) -> None:
        """On the loop: run every queued completion; one that raises never drops the rest."""
        assert self._loop is not None
        with self._queued_lock:
            self._wake_pending = False
            ready, self._queued = self._queued, deque()
        for method, args in ready:
            try:
                method(*args)
            except Exception as exc:  # noqa: BLE001 - reported as the loop reports callbacks
                self._loop.call_exception_handler(
                    {"message": f"{self.name}: a completion failed", "exception": exc})

    def _output(self, result: InferResult) -> Any:
        first = next(iter(result.outputs.values()))
        return first.argmax(axis=-1) if self._labelled else first

    def _store_output(self, state: _Chunked, start: int, result: InferResult) -> None:
        """Copy a chunk's outputs into the query's array, made when the first chunk ends.

        One array filled in place, not an array kept per chunk: small allocations kept by
        the worker threads fragment their malloc arena until every forward pass faults in
        fresh pages (measured ~15% slower compute, mlp at batch 256).
        """
        output = self._output(result)
        if state.outputs is None:
            state.outputs = np.empty((len(state.sample_done), *output.shape[1:]), output.dtype)
        state.outputs[start:start + len(output)] = output

    def _finished(self, query_id: int, result: InferResult | BaseException) -> None:
        assert self._sink is not None
        if isinstance(result, BaseException):
            self._post(self._sink.failed, query_id, time.perf_counter_ns(), _kind(result),
                       _detail(result))
            return
        components = {**result.timings_ns, BATCH_SIZE: result.batch_size}
        self._post(self._sink.done, query_id, result.done_ns, components, None,
                   self._output(result))

    def _issue_chunked(self, query_id: int, indices: np.ndarray) -> None:
        rows = self._service.metadata.max_batch_size
        state = _Chunked(np.remainder(indices, self._size), rows)
        while True:  # fill the window; each completion then sends at most the next chunk
            with state.lock:
                claim = self._claim(state)
            if not self._send_chunk(query_id, state, claim):
                return

    def _claim(self, state: _Chunked) -> int | None:
        """Under `state.lock`: the next chunk to send (counted in flight), `_REPORT` once,
        when every chunk sent has ended and no more will be, else None."""
        if state.failure is None and state.sent < len(state.chunks) \
                and state.outstanding < self._window:
            index = state.sent
            state.sent += 1
            state.outstanding += 1
            return index
        if state.outstanding == 0 and not state.reported:
            state.reported = True
            return _REPORT
        return None

    def _send_chunk(self, query_id: int, state: _Chunked, claim: int | None) -> bool:
        """Send the claimed chunk (or report the query at `_REPORT`); whether one was sent.
        A chunk the service refuses fails the query, and the next claim is followed."""
        while claim is not None:
            if claim == _REPORT:
                self._report_chunked(query_id, state)
                return False
            inputs, lent = self._gather(state.chunks[claim])
            try:
                self._service.submit(inputs, partial(self._chunk_done, query_id, state, claim),
                                     lent=lent)
                return True
            except sut_errors.SutError as exc:
                with state.lock:
                    state.outstanding -= 1
                    state.failure = state.failure or exc
                    claim = self._claim(state)
        return False

    def _chunk_done(self, query_id: int, state: _Chunked, index: int,
                    result: InferResult | BaseException) -> None:
        """A chunk ended (in a sut thread): note it, and send the next chunk in its place."""
        with state.lock:
            state.outstanding -= 1
            if isinstance(result, BaseException):
                state.failure = state.failure or result
            else:
                start = index * state.rows
                state.sample_done[start:start + len(state.chunks[index])] = result.done_ns
                self._store_output(state, start, result)
                if result.done_ns >= state.last_done:
                    state.last_done, state.last = result.done_ns, result
            claim = self._claim(state)
        self._send_chunk(query_id, state, claim)

    def _report_chunked(self, query_id: int, state: _Chunked) -> None:
        assert self._sink is not None
        if state.failure is not None:
            self._post(self._sink.failed, query_id, time.perf_counter_ns(), _kind(state.failure),
                       _detail(state.failure))
        else:
            last = state.last
            components = ({**last.timings_ns, BATCH_SIZE: last.batch_size}
                          if last is not None else {})
            self._post(self._sink.done, query_id, state.last_done, components,
                       state.sample_done, state.outputs)
