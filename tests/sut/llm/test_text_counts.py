"""A built-in byte model's text is exact: served text bytes equal `completion_tokens`."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import torch

from sut.llm.attention import PagedBatch
from sut.llm.config import EngineConfig
from sut.llm.model import EMITTABLE, load_causal_model
from sut.llm.server import LlmServerThread
from sut.llm.tokenizer import VOCAB_SIZE, encode
from sut.server.core import ServerConfig

pytestmark = pytest.mark.functional


def test_the_output_layer_masks_every_token_but_the_emittable() -> None:
    model = load_causal_model("tiny-llm", seed=3)
    tokens = torch.tensor(encode("\xff\x01 any bytes at all"))
    n = len(tokens)
    span = torch.arange(n)
    cache = [(torch.zeros((1, n, model.num_kv_heads, model.head_dim)),
              torch.zeros((1, n, model.num_kv_heads, model.head_dim)))
             for _ in range(model.num_layers)]
    batch = PagedBatch(cache, span, torch.zeros((1, 1), dtype=torch.long), span[None],
                       span[None], span)
    with torch.inference_mode():
        logits = model(tokens, span, batch)
    finite = {i for i in range(VOCAB_SIZE) if bool(torch.isfinite(logits[:, i]).all())}
    silenced = {i for i in range(VOCAB_SIZE) if bool(torch.isneginf(logits[:, i]).all())}
    assert finite == set(EMITTABLE) and silenced == set(range(VOCAB_SIZE)) - EMITTABLE


@pytest.fixture(scope="module")
def server() -> Iterator[LlmServerThread]:
    with LlmServerThread("tiny-llm", EngineConfig(device="cpu", max_num_seqs=8),
                         ServerConfig(http_port=0)) as running:
        yield running


async def _answer(url: str, body: dict[str, Any]) -> tuple[str, str, int]:
    """The text, finish reason and completion_tokens of one request, streamed or not."""
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        assert response.status == 200, await response.text()
        if not body.get("stream"):
            answer = await response.json()
            choice = answer["choices"][0]
            text = choice["message"]["content"] if "message" in choice else choice["text"]
            return text, choice["finish_reason"], answer["usage"]["completion_tokens"]
        raw = (await response.read()).decode()
    events = [json.loads(block[len("data: "):]) for block in raw.split("\n\n")[:-1]
              if block != "data: [DONE]"]
    choices = [e["choices"][0] for e in events if e["choices"]]
    text = "".join(c["delta"].get("content", "") if "delta" in c else c["text"]
                   for c in choices)
    return text, choices[-1]["finish_reason"], events[-1]["usage"]["completion_tokens"]


def _bodies() -> list[tuple[str, dict[str, Any]]]:
    """Chat and completions, streamed and not, fixed length, free to stop, and sampled."""
    bodies = []
    for i, (path, stream) in enumerate([("chat/completions", True), ("chat/completions", False),
                                        ("completions", True), ("completions", False)]):
        prompt: dict[str, Any] = (
            {"messages": [{"role": "user", "content": f"Tell tale {i} \u00e9\u00e8"}]}
            if path.startswith("chat") else {"prompt": f"Once upon a time {i} \u2603"})
        stream_options = {"stream_options": {"include_usage": True}} if stream else {}
        for lengths in ({"max_tokens": 40, "ignore_eos": True, "min_tokens": 40},
                        {"max_tokens": 60},
                        {"max_tokens": 50, "temperature": 1.5, "seed": 7 + i},
                        {"max_tokens": 50, "temperature": 3.0, "ignore_eos": True, "seed": i}):
            bodies.append((f"/v1/{path}", {"model": "tiny-llm", "stream": stream,
                                           **prompt, **stream_options, **lengths}))
    return bodies


def test_served_text_bytes_equal_completion_tokens(server: LlmServerThread) -> None:
    bodies = _bodies()

    async def all_answers() -> list[tuple[str, str, int]]:
        return await asyncio.gather(*(_answer(f"{server.url}{path}", body)
                                      for path, body in bodies))

    answers = asyncio.run(asyncio.wait_for(all_answers(), 300))
    for (_, body), (text, finish, completion_tokens) in zip(bodies, answers, strict=True):
        closing_eos = int(finish == "stop")  # a closing EOS is a token without text
        assert len(text.encode()) + closing_eos == completion_tokens, (body, text, finish)
        assert "\ufffd" not in text and all(ord(c) in EMITTABLE for c in text)
        if body.get("ignore_eos"):
            assert finish == "length" and len(text.encode()) == completion_tokens
