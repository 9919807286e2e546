"""Multi-turn sessions over HTTP: a later turn carries the session's history (chat: the
messages with the assistant's earlier answers; completions and generate: the text
concatenated), and a whole Server run of sessions against the scripted SSE server."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.adapters.generate import GenerateSut
from loadgen.adapters.history import Exchanged
from loadgen.adapters.openai import OpenAISut
from loadgen.adapters.tokens import Prompt, Turn
from loadgen.api import run_test
from loadgen.plan.settings import settings_from_mapping
from tests.loadgen.llm_wire.scripted import (
    Collected,
    Prompts,
    chat_chunk,
    scripted,
    sse_response,
)
from tests.loadgen.llm_wire.test_end_to_end_functional import MS, stream_server

pytestmark = pytest.mark.functional

QUESTION = Prompt("What now?", 3, 4)


async def two_turns(first: list[Any], second: list[Any]
                    ) -> tuple[Collected, list[dict[str, Any]], OpenAISut]:
    """Turn 1 of a two-turn session on a chat endpoint, then turn 2; (what came back, the
    request bodies, the adapter)."""
    async with scripted([sse_response(first), sse_response(second)]) as server:
        sink = Collected(expected=1)
        sut = OpenAISut.from_spec(f"openai://127.0.0.1:{server.port}/m?max_in_flight=1")
        sut.use_prompts(Prompts(QUESTION))
        await sut.start(sink, None)  # type: ignore[arg-type]
        try:
            sut.issue_turn(0, 0, Turn(0, 1, 2))
            await asyncio.wait_for(sink.finished.wait(), 10)
            sink.finished.clear()
            sink.expected = 2
            sut.issue_turn(1, 1, Turn(0, 2, 2))
            await asyncio.wait_for(sink.finished.wait(), 10)
        finally:
            await sut.stop()
    bodies = [json.loads(r.split(b"\r\n\r\n", 1)[1]) for r in server.served.requests]
    return sink, bodies, sut


def test_chat_turn_two_carries_turn_ones_answer_in_its_messages() -> None:
    sink, bodies, sut = asyncio.run(two_turns(
        [chat_chunk("", role=True), chat_chunk("Hel", reasoning="hm"), chat_chunk("lo there")],
        [chat_chunk(" fine")]))
    assert bodies[0]["messages"] == [{"role": "user", "content": "What now?"}]
    assert bodies[1]["messages"] == [{"role": "user", "content": "What now?"},
                                     {"role": "assistant", "content": "Hello there"},
                                     {"role": "user", "content": "What now?"}]
    first, second = sink.streams[0][1], sink.streams[1][1]
    assert (first.turn, second.turn) == (1, 2)
    # no usage: the workload's counts, grown by turn 1's prompt and answer (3 + 4 + 3)
    assert first.input_tokens == 3 and first.output_tokens == 4 and second.input_tokens == 10
    assert not sut.histories.sessions  # the last turn dropped the history


def test_completions_and_generate_concatenate_the_history() -> None:
    chat = OpenAISut.from_spec("openai://127.0.0.1:1/m?endpoint=completions")
    history = [Exchanged(Prompt("Q1.", 2, 4), " A1.", 2)]
    assert chat.body(QUESTION, history)["prompt"] == "Q1. A1.What now?"
    generate = GenerateSut.from_spec("generate://127.0.0.1:1/m")
    assert generate.body(QUESTION, history)["text_input"] == "Q1. A1.What now?"


def test_a_failed_turn_ends_its_session_and_drops_the_history() -> None:
    async def go() -> OpenAISut:
        steps = [b"HTTP/1.1 500 X\r\nContent-Length: 2\r\n\r\nno"]
        async with scripted([steps]) as server:
            sink = Collected(expected=1)
            streaming = OpenAISut.from_spec(f"openai://127.0.0.1:{server.port}/m?max_in_flight=1")
            streaming.use_prompts(Prompts(QUESTION))
            await streaming.start(sink, None)  # type: ignore[arg-type]
            try:
                streaming.issue_turn(0, 0, Turn(0, 1, 3))
                await asyncio.wait_for(sink.finished.wait(), 10)
            finally:
                await streaming.stop()
        assert sink.failures[0][1] == "http_500"
        return streaming

    assert not asyncio.run(go()).histories.sessions


class Recording(OpenAISut):
    """The adapter, keeping each request's messages."""

    def __init__(self, spec: str) -> None:
        super().__init__(OpenAISut.from_spec(spec).endpoint)
        self.sent: list[list[dict[str, str]]] = []

    def body(self, prompt: Prompt, history: Any = ()) -> dict[str, Any]:
        out = super().body(prompt, history)
        self.sent.append(out["messages"])
        return out


def test_a_server_run_of_sessions_sends_each_turn_with_its_history(tmp_path: Path) -> None:
    log = tmp_path / "server.jsonl"
    with stream_server(log, "--ttft-ms", "5", "--gap-ms", "2", "--chunks", "3") as port:
        sut = Recording(f"openai://127.0.0.1:{port}/m?max_in_flight=8&preflight=0")
        run_test(settings_from_mapping({
            "scenario": "Server", "target_qps": 10.0, "preset": "dev", "min_duration_s": 1.0,
            "min_query_count": 8, "input_tokens": 4, "output_tokens": 3, "fixed_output": True,
            "turns": 3, "think_time_ms": 300.0, "target_latency_ms": 5000.0,
            "max_issue_lag_ms": 1000.0}), sut, out_dir=tmp_path / "run")
    doc = json.loads((tmp_path / "run" / "result.json").read_text())
    sessions = doc["turns"]["1"]["count"]
    assert sessions >= 8 and doc["turns"]["3"]["count"] == sessions
    by_length = sorted(len(m) for m in sut.sent)
    assert by_length == [1] * sessions + [3] * sessions + [5] * sessions
    answer = " t t t"  # the server's three chunks
    for messages in sut.sent:
        assert [m["content"] for m in messages[1::2]] == [answer] * (len(messages) // 2)
        assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2) \
            + ["user"]
    # each turn's TTFT runs from its own schedule: at least the server's 5 ms, and never
    # the think time (300 ms) that came before it
    for k in ("2", "3"):
        assert 5 * MS <= doc["turns"][k]["ttft_ns"]["min"]
        assert doc["turns"][k]["ttft_ns"]["p50"] < 300 * MS
