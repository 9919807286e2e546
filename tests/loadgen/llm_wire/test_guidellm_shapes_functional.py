"""openai:// against the stream shapes of GuideLLM's mock server (`guidellm mock-server`, 0.8.1,
`mock_server/handlers/`), replayed by the scripted server: the package itself needs torch,
transformers and datasets, too heavy for a test of the wire.

What sets those shapes apart from vLLM's: no role chunk; `json.dumps` with its default
separators (a space after `:` and `,`); a closing chunk with an empty delta (chat) or empty
text (completions) and `finish_reason` `stop` even when `max_tokens` ended it; completions
whose choice `index` is the token's position; a usage chunk with `choices: []` before
`[DONE]`; `Connection: keep-alive` on a chunked answer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from loadgen.adapters.openai import OpenAISut
from loadgen.adapters.tokens import Prompt
from tests.loadgen.llm_wire.scripted import chunk, head, run_bounded, run_streams, scripted

pytestmark = pytest.mark.functional

TOKENS = ["Once", " upon", " a", " time"]
FIXED = Prompt("hello", 3, len(TOKENS), fixed_output=True)
USAGE = {"prompt_tokens": 3, "completion_tokens": len(TOKENS), "total_tokens": 3 + len(TOKENS)}


def guidellm_answer(chat: bool) -> list[bytes | float | str]:
    """The chunks GuideLLM's mock writes for TOKENS, with include_usage asked."""
    kind = "chat.completion.chunk" if chat else "text_completion"
    frame = {"id": "chatcmpl-0f3a" if chat else "cmpl-0f3a", "object": kind,
             "created": 1790000000, "model": "m"}
    docs: list[dict[str, Any]] = []
    for i, token in enumerate(TOKENS):
        choice = {"index": 0, "delta": {"content": token}, "finish_reason": None} if chat \
            else {"text": token, "index": i, "finish_reason": None}
        docs.append(frame | {"choices": [choice]})
    last = len(TOKENS) - 1
    docs.append(frame | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"} if chat
                                     else {"text": "", "index": last, "finish_reason": "stop"}]})
    docs.append(frame | {"choices": [], "usage": USAGE})
    steps: list[bytes | float | str] = [head(extra="Connection: keep-alive")]
    for i, doc in enumerate(docs):
        if i:
            steps.append(0.005)
        steps.append(chunk(f"data: {json.dumps(doc)}\n\n".encode()))
    return [*steps, chunk(b"data: [DONE]\n\n"), chunk(b"")]


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_guidellm_mock_streams_read_as_vllms(endpoint: str) -> None:
    async def go() -> None:
        async with scripted([guidellm_answer(endpoint == "chat")] * 2) as server:
            sut = OpenAISut.from_spec(
                f"openai://127.0.0.1:{server.port}/m?endpoint={endpoint}&max_in_flight=2")
            sink, _ = await run_streams(sut, count=2, prompt=FIXED)
        assert not sink.failures
        for query in (0, 1):
            _, stream = sink.streams[query]
            assert stream.chunk_tokens == [1, 1, 1, 1] and stream.first_answer == 0
            assert stream.server_output_tokens == len(TOKENS) == stream.client_tokens
            assert stream.input_tokens == 3 and stream.finish_reason == "stop"
        # every token asked for came: "stop" at max_tokens is no early end
        assert sut.describe()["fixed_output_short"] == 0
        body = json.loads(server.served.requests[0].split(b"\r\n\r\n", 1)[1])
        assert body["stream_options"] == {"include_usage": True}
        assert body["ignore_eos"] is True and body["min_tokens"] == len(TOKENS)
    run_bounded(go())


def test_a_stop_before_max_tokens_is_counted_short() -> None:
    async def go() -> None:
        async with scripted([guidellm_answer(chat=True)]) as server:
            sut = OpenAISut.from_spec(f"openai://127.0.0.1:{server.port}/m?max_in_flight=1")
            await run_streams(sut, prompt=Prompt("hello", 3, 8, fixed_output=True))
        assert sut.describe()["fixed_output_short"] == 1
    run_bounded(go())
