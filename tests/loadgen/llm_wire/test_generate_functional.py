"""generate:// (OIP / Triton `generate_stream`) against the scripted SSE server."""

from __future__ import annotations

import asyncio
import json

import pytest

from loadgen.adapters.generate import GenerateSut
from loadgen.adapters.registry import make_sut
from loadgen.adapters.tokens import Prompt
from loadgen.errors import SutSpecError
from tests.loadgen.llm_wire.scripted import CLOSE, head, run_streams, scripted, sse_response

pytestmark = pytest.mark.functional


def step(text: str, **more: object) -> dict[str, object]:
    return {"model_name": "m", "model_version": "1", "text_output": text, **more}


def test_text_output_events_make_the_stream_and_no_end_marker_is_needed() -> None:
    async def go() -> None:
        events = [step(" The"), step(" answer is"), step("", finish_reason="length")]
        async with scripted([sse_response(events, done=False)]) as server:
            sut = make_sut(f"generate://127.0.0.1:{server.port}/m?max_in_flight=1")
            assert isinstance(sut, GenerateSut)
            sink, _ = await run_streams(sut, prompt=Prompt("q", 1, 3, fixed_output=True))
        stream = sink.streams[0][1]
        assert stream.chunk_tokens == [1, 2] and stream.first_answer == 0
        assert stream.server_output_tokens is None and stream.finish_reason == "length"
        request = server.served.requests[0]
        assert request.startswith(b"POST /v2/models/m/generate_stream HTTP/1.1")
        body = json.loads(request.split(b"\r\n\r\n", 1)[1])
        assert body == {"text_input": "q", "parameters": {
            "stream": True, "max_tokens": 3, "ignore_eos": True, "min_tokens": 3}}
    asyncio.run(go())


def test_max_tokens_at_top_version_and_extra() -> None:
    sut = GenerateSut.from_spec("generate://h:1/m?version=2&max_tokens_at=top"
                                "&extra=%7B%22temperature%22%3A0%7D&ignore_eos=0")
    body = sut.body(Prompt("q", 1, 5, fixed_output=True))
    assert body == {"text_input": "q", "max_tokens": 5,
                    "parameters": {"stream": True, "temperature": 0}}
    assert sut.path == "/v2/models/m/versions/2/generate_stream"
    with pytest.raises(SutSpecError, match="parameters or top"):
        GenerateSut.from_spec("generate://h:1/m?max_tokens_at=middle")


def test_an_in_band_error_and_a_close_delimited_stream() -> None:
    async def go() -> None:
        failing = sse_response([step("a"), {"error": "model instance crashed"}], done=False)
        closing = [head(chunked=False), b"data: " + json.dumps(step("b")).encode() + b"\n\n",
                   CLOSE]
        async with scripted([failing, closing]) as server:
            sut = make_sut(f"generate://127.0.0.1:{server.port}/m?max_in_flight=1")
            sink, _ = await run_streams(sut, count=2)  # type: ignore[arg-type]
        _, kind, detail, stream = sink.failures[0]
        assert kind == "stream_error" and detail == "model instance crashed"
        assert stream is not None and len(stream.chunk_ns) == 1
        assert len(sink.streams[1][1].chunk_ns) == 1  # no [DONE] needed at close
    asyncio.run(go())
