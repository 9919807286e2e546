"""`--sut builtin:tiny-llm,...`: the in-process adapter streams tokens into a sink."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from loadgen.adapters.llm import LlmSut
from loadgen.adapters.registry import make_sut
from loadgen.adapters.tokens import Prompt, TokenStream, Turn
from loadgen.errors import SutSpecError


class _Prompts:
    def prompt(self, index: int) -> Prompt:
        return Prompt(f"Prompt number {index} asks something.", 30, 8 + index % 3,
                      fixed_output=True)


class _Sink:
    """Records what the adapter reports; sets `all_in` when `expected` queries have ended."""

    def __init__(self, expected: int) -> None:
        self.streams: dict[int, tuple[int, TokenStream, Mapping[str, int] | None]] = {}
        self.failures: dict[int, tuple[str, TokenStream | None]] = {}
        self.expected = expected
        self.all_in = asyncio.Event()

    def _check(self) -> None:
        if len(self.streams) + len(self.failures) == self.expected:
            self.all_in.set()

    def streamed(self, query_id: int, done_ns: int, stream: TokenStream,
                 components: Mapping[str, int] | None = None, output: Any = None) -> None:
        self.streams[query_id] = (done_ns, stream, components)
        self._check()

    def failed(self, query_id: int, done_ns: int, kind: str, detail: str | None = None,
               stream: TokenStream | None = None) -> None:
        self.failures[query_id] = (kind, stream)
        self._check()

    def done(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError("a streaming SUT reports with streamed")


class _Timers:
    def call_at_ns(self, when_ns: int, callback: Any) -> None:
        raise AssertionError("not used")


@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_streams_every_query_with_its_timings(scheduler: str) -> None:
    sut = make_sut(f"builtin:tiny-llm,max_num_seqs=4,scheduler={scheduler},device=cpu")
    assert isinstance(sut, LlmSut)
    sut.use_prompts(_Prompts())
    sink = _Sink(7)

    async def run() -> None:
        await sut.start(sink, _Timers())  # type: ignore[arg-type]
        for query_id in range(6):
            sut.issue(query_id, np.array([query_id]))
        sut.issue(6, np.array([1, 2]))  # an Offline-style query of two samples
        await asyncio.wait_for(sink.all_in.wait(), 120)
        await sut.stop()

    asyncio.run(run())
    assert not sink.failures
    for query_id in range(6):
        done_ns, stream, components = sink.streams[query_id]
        want = 8 + query_id % 3
        assert stream.output_tokens == want == sum(stream.chunk_tokens) == stream.client_tokens
        assert stream.chunk_ns == sorted(stream.chunk_ns) and done_ns == stream.chunk_ns[-1]
        assert stream.first_answer == 0 and stream.finish_reason == "length"
        assert stream.input_tokens == len(_Prompts().prompt(query_id).text) + 1  # BOS
        assert components is not None and set(components) == {
            "queue", "prefill", "decode", "server_total"}
        assert components["server_total"] >= components["prefill"] + components["decode"]
    assert sink.streams[6][1].output_tokens == (8 + 1) + (8 + 2)
    assert sut.describe()["scheduler"] == scheduler


def test_overload_is_a_failure_and_bad_specs_are_refused() -> None:
    sut = make_sut("builtin:tiny-llm,max_waiting=1,max_num_seqs=1,device=cpu")
    sut.use_prompts(_Prompts())  # type: ignore[attr-defined]
    sink = _Sink(20)

    async def run() -> None:
        await sut.start(sink, _Timers())  # type: ignore[arg-type]
        for query_id in range(20):
            sut.issue(query_id, np.array([query_id]))
        await asyncio.wait_for(sink.all_in.wait(), 120)
        await sut.stop()

    asyncio.run(run())
    assert sink.failures and {kind for kind, _ in sink.failures.values()} == {"overloaded"}
    assert sink.streams
    with pytest.raises(SutSpecError, match="max_num_seq"):
        make_sut("builtin:tiny-llm,max_num_seq=4")
    with pytest.raises(SutSpecError, match="scheduler"):
        make_sut("builtin:tiny-llm,scheduler=dynamic")


def test_a_sessions_next_turn_is_sent_after_its_history() -> None:
    sut = make_sut("builtin:tiny-llm,max_num_seqs=4,device=cpu")
    assert isinstance(sut, LlmSut)
    prompts = _Prompts()
    sut.use_prompts(prompts)
    sink = _Sink(1)

    async def run() -> None:
        await sut.start(sink, _Timers())  # type: ignore[arg-type]
        sut.issue_turn(0, 0, Turn(0, 1, 3))
        await asyncio.wait_for(sink.all_in.wait(), 120)
        sink.all_in.clear()
        sink.expected = 2
        sut.issue_turn(1, 1, Turn(0, 2, 3))
        await asyncio.wait_for(sink.all_in.wait(), 120)
        await sut.stop()

    asyncio.run(run())
    assert not sink.failures
    first, second = sink.streams[0][1], sink.streams[1][1]
    assert (first.turn, second.turn) == (1, 2)
    earlier, answered = sut.histories.sessions[0]  # kept: a third turn would follow
    assert earlier.prompt == prompts.prompt(0) and earlier.answer_tokens == first.output_tokens
    # the whole session so far, as bytes behind one BOS: the prompt grew by turn 1's
    # prompt and answer
    assert second.input_tokens == 1 + sum(len(text.encode()) for text in (
        prompts.prompt(0).text, earlier.answer, prompts.prompt(1).text))
    assert answered.answer_tokens == second.output_tokens
