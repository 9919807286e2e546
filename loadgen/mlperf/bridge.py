"""The harness as a SUT: our engine issues, the harness's callbacks answer, from any thread.

`HarnessSut.issue` hands each query to the harness's issue callback as a list
of `QuerySample`s. A sample's id packs its query and position ((query + 1) << 32
| position), so a completion finds its query without a shared table. The
harness answers with the module-level `QuerySamplesComplete` (and, for tokens,
`FirstTokenComplete`) from whatever thread it likes: the stamp is taken there,
response bytes are copied there (`ctypes.string_at`, only when they are
logged, after the harness's `response_cb` had its chance to fill them), and the
rest moves to the loop with `call_soon_threadsafe`. A query completes when its
last sample does, with per-sample finish times.
"""

from __future__ import annotations

import asyncio
import ctypes
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from loadgen.adapters.base import CompletionSink, Timers
from loadgen.adapters.tokens import StreamSink, TokenStream
from loadgen.mlperf.types import QuerySample, QuerySampleResponse

__all__ = ["AccuracyRow", "HarnessSut", "first_token_complete", "query_samples_complete"]

IssueCallback = Callable[[list[QuerySample]], None]
ResponseCallback = Callable[[QuerySampleResponse], None] | None

_POSITION_BITS = 32
_POSITION_MASK = (1 << _POSITION_BITS) - 1


@dataclass(frozen=True, slots=True)
class AccuracyRow:
    """One line of mlperf_log_accuracy.json."""

    seq_id: int
    qsl_idx: int
    data: bytes
    n_tokens: int
    token_data: bytes | None = None  # the first token's bytes (FirstTokenComplete), if sent


@dataclass(slots=True)
class _Pending:
    """A query in flight: its samples' indices, sequence ids and finish times."""

    indices: list[int]
    first_seq: int
    issued_ns: int
    left: int
    done_ns: list[int]
    first_token_ns: list[int]
    n_tokens: list[int] = field(default_factory=list)
    first_data: dict[int, bytes] = field(default_factory=dict)


class HarnessSut:
    """A `SystemUnderTest` over a LoadGen harness's issue and flush callbacks."""

    shares_gil = True  # the harness answers from Python threads of this process

    def __init__(self, name: str, issue_cb: IssueCallback, flush_cb: Callable[[], None], *,
                 log_all: bool = False, log_probability: float = 0.0, log_seed: int = 0,
                 tokens: bool = False, trace: bool = False) -> None:
        self.name = name
        self._issue_cb, self._flush_cb = issue_cb, flush_cb
        self._log_all, self._tokens, self._trace = log_all, tokens, trace
        self._log_probability = log_probability
        self._log_draw = random.Random(log_seed)
        self._log_ids: set[int] = set()
        self._pending: dict[int, _Pending] = {}
        self._next_seq = 0
        self._sink: CompletionSink | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.accuracy: list[AccuracyRow] = []
        self.trace: list[tuple[int, int, int, int, int]] = []  # seq, query, index, issued, done
        self.start_ns = 0
        self.loop_thread = 0

    async def start(self, sink: CompletionSink, timers: Timers) -> None:
        self._sink, self.loop = sink, asyncio.get_running_loop()
        self.loop_thread = threading.get_ident()
        self.start_ns = time.perf_counter_ns()
        _activate(self)

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        indices = sample_indices.tolist()
        n = len(indices)
        base = (query_id + 1) << _POSITION_BITS
        self._pending[query_id] = _Pending(indices, self._next_seq, time.perf_counter_ns(), n,
                                           [0] * n, [0] * n, [0] * n)
        samples = [QuerySample(base | i, index) for i, index in enumerate(indices)]
        if self._log_probability and not self._log_all:
            self._log_ids.update(s.id for s in samples
                                 if self._log_draw.random() < self._log_probability)
        self._next_seq += n
        try:
            self._issue_cb(samples)
        except Exception as exc:  # noqa: BLE001 - any harness error fails its query, reported
            self._pending.pop(query_id, None)
            assert self._sink is not None
            self._sink.failed(query_id, time.perf_counter_ns(), "error",
                              f"issue callback: {type(exc).__name__}: {exc}")

    async def stop(self) -> None:
        self._flush_cb()
        _deactivate(self)

    def describe(self) -> dict[str, Any]:
        return {"kind": "mlperf_loadgen harness", "name": self.name}

    def logs(self, sample_id: int) -> bool:
        """Whether this sample's response bytes go to the accuracy log."""
        return self._log_all or sample_id in self._log_ids

    def completed(self, answers: Sequence[tuple[int, int]], done_ns: int,
                  data: dict[int, bytes]) -> None:
        """On the loop: samples answered at `done_ns` ((id, n_tokens) each)."""
        for sample_id, n_tokens in answers:
            query_id = (sample_id >> _POSITION_BITS) - 1
            position = sample_id & _POSITION_MASK
            pending = self._pending.get(query_id)
            if pending is None or pending.done_ns[position]:
                continue  # unknown, or answered twice: the first answer counts
            pending.done_ns[position] = done_ns
            pending.n_tokens[position] = n_tokens
            pending.left -= 1
            if sample_id in data:
                self.accuracy.append(AccuracyRow(pending.first_seq + position,
                                                 pending.indices[position], data[sample_id],
                                                 n_tokens, pending.first_data.get(position)))
            if pending.left == 0:
                del self._pending[query_id]
                self._finish(query_id, pending)

    def first_token(self, sample_ids: Sequence[int], stamp_ns: int,
                    data: dict[int, bytes]) -> None:
        """On the loop: the first token of these samples arrived at `stamp_ns`."""
        for sample_id in sample_ids:
            pending = self._pending.get((sample_id >> _POSITION_BITS) - 1)
            position = sample_id & _POSITION_MASK
            if pending is not None and not pending.first_token_ns[position]:
                pending.first_token_ns[position] = stamp_ns
                if sample_id in data:
                    pending.first_data[position] = data[sample_id]

    def _finish(self, query_id: int, p: _Pending) -> None:
        assert self._sink is not None
        last = max(p.done_ns)
        if self._trace:
            self.trace.extend((p.first_seq + i, query_id, index, p.issued_ns, p.done_ns[i])
                              for i, index in enumerate(p.indices))
        if self._tokens:
            sink = cast(StreamSink, self._sink)
            streams = [_stream(p.first_token_ns[i], p.done_ns[i], p.n_tokens[i])
                       for i in range(len(p.indices))]
            if len(streams) == 1:
                sink.streamed(query_id, last, streams[0])
                return
            for stream in streams:  # a query of several samples: one stream each, then done
                sink.sample_streamed(query_id, stream)
        self._sink.done(query_id, last, sample_done_ns=p.done_ns if len(p.done_ns) > 1 else None)


def _stream(first_ns: int, last_ns: int, n_tokens: int) -> TokenStream:
    """A sample's answer as a token stream: the first token, then the rest at the end."""
    stream = TokenStream()
    if first_ns and n_tokens > 1:
        stream.add(first_ns, 1)
        stream.add(last_ns, n_tokens - 1)
    else:
        stream.add(first_ns or last_ns, max(n_tokens, 1))
    stream.server_output_tokens = n_tokens or None
    return stream


_lock = threading.Lock()
_active: HarnessSut | None = None


def _activate(sut: HarnessSut) -> None:
    global _active
    with _lock:
        _active = sut


def _deactivate(sut: HarnessSut) -> None:
    global _active
    with _lock:
        if _active is sut:
            _active = None


def _running(what: str) -> HarnessSut:
    sut = _active
    if sut is None or sut.loop is None:
        raise RuntimeError(f"{what}: no test is running (StartTest has not begun or has ended)")
    return sut


def query_samples_complete(responses: Sequence[QuerySampleResponse],
                           response_cb: ResponseCallback = None) -> None:
    """LoadGen's `QuerySamplesComplete`: stamp now, copy logged bytes, hand on to the loop."""
    done_ns = time.perf_counter_ns()
    sut = _running("QuerySamplesComplete")
    data = _logged_bytes(sut, responses, response_cb)
    answers = [(r.id, r.n_tokens) for r in responses]
    _later(sut)(sut.completed, answers, done_ns, data)


def first_token_complete(responses: Sequence[QuerySampleResponse],
                         response_cb: ResponseCallback = None) -> None:
    """LoadGen's `FirstTokenComplete`: the first token of each response's sample is out now."""
    stamp_ns = time.perf_counter_ns()
    sut = _running("FirstTokenComplete")
    data = _logged_bytes(sut, responses, response_cb)
    _later(sut)(sut.first_token, [r.id for r in responses], stamp_ns, data)


def _later(sut: HarnessSut) -> Callable[..., object]:
    """How to run a callback on the loop: `call_soon` from the loop's own thread (an answer
    given inside the issue callback; no wake-up needed), else `call_soon_threadsafe`."""
    assert sut.loop is not None
    if threading.get_ident() == sut.loop_thread:
        return sut.loop.call_soon
    return sut.loop.call_soon_threadsafe


def _logged_bytes(sut: HarnessSut, responses: Sequence[QuerySampleResponse],
                  response_cb: ResponseCallback) -> dict[int, bytes]:
    """The bytes of the responses the accuracy log keeps, read now (the harness may reuse the
    buffer once the call returns), after `response_cb` had its chance to fill them."""
    data: dict[int, bytes] = {}
    for response in responses:
        if sut.logs(response.id):
            if response_cb is not None:
                response_cb(response)
            data[response.id] = ctypes.string_at(response.data, response.size) \
                if response.size else b""
    return data
