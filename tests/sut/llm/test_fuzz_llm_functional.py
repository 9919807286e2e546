"""Fuzz the LLM server's OpenAI and OIP generate routes with hostile JSON bodies: every answer
is 2xx or 4xx (no in-band error either), and after each the engine is alive and every KV
block is free again.

Examples per test: `LOADGEN_FUZZ_EXAMPLES` (default 100).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sut.llm.config import EngineConfig
from sut.llm.server import LlmServerThread
from sut.server.core import ServerConfig
from tests.sut.llm.hostile import post

pytestmark = pytest.mark.functional

EXAMPLES = int(os.environ.get("LOADGEN_FUZZ_EXAMPLES", "100"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])

surrogates = st.sampled_from(["\ud800", "a\udfffb", "\udc80\ud800"])
texts = st.text(max_size=12) | surrogates
numbers = (st.integers(-3, 8) | st.integers() | st.sampled_from([2**45, -(2**44), 2**63, 2**70])
           | st.floats() | st.sampled_from([1e999, -1e999, 1e308, 1e-45, 1e-300, 0.0]))
scalars = st.none() | st.booleans() | numbers | texts
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=8)
token_ids = st.lists(st.integers(-2, 300) | st.sampled_from([2**40, -(2**63)]), max_size=8)


def often(good: Any, other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` three times in four, else `other`."""
    return st.one_of(st.just(good), st.just(good), st.just(good), other)


KNOBS = {
    "max_tokens": often(3, numbers), "temperature": often(0, numbers),
    "top_p": numbers, "top_k": numbers, "seed": numbers, "min_tokens": numbers,
    "priority": numbers, "ignore_eos": often(True, scalars), "stream": often(False, scalars),
    "stop": st.none() | texts | st.lists(texts, max_size=4) | values,
    "n": often(1, scalars), "logprobs": scalars, "top_logprobs": scalars,
    "echo": scalars, "best_of": scalars, "model": often("tiny-llm", scalars),
    "stream_options": st.none() | st.fixed_dictionaries(
        {}, optional={"include_usage": scalars, "continuous_usage_stats": scalars}) | values,
}
prompts = often("Hello", texts | token_ids | values)
parts = st.lists(st.fixed_dictionaries({}, optional={
    "type": often("text", texts), "text": texts | values}), max_size=2)
message = st.fixed_dictionaries({}, optional={
    "role": often("user", texts | values), "content": often("Hi", texts | values | parts)})
messages = often([{"role": "user", "content": "Hi"}], st.lists(message, max_size=3) | values)
completions = st.fixed_dictionaries({"prompt": prompts}, optional=KNOBS) | values
chats = st.fixed_dictionaries({"messages": messages}, optional=KNOBS) | values
generates = st.fixed_dictionaries({"text_input": often("Hello", texts | values)}, optional={
    "parameters": st.fixed_dictionaries({"max_tokens": often(3, numbers)}, optional={
        k: v for k, v in KNOBS.items() if k != "max_tokens"}) | values}) | values
garbage = st.sampled_from(["", "{", "[" * 50_000 + "]" * 50_000, "null", '"\\ud800"',
                           "\x00\xff", '{"prompt": NaN}'])


@pytest.fixture(scope="module")
def server() -> Iterator[LlmServerThread]:
    config = EngineConfig(device="cpu", max_num_seqs=4, max_model_len=64)
    with LlmServerThread("tiny-llm", config, ServerConfig(http_port=0)) as running:
        yield running


def _check(server: LlmServerThread, path: str, body: Any) -> None:
    raw = body if isinstance(body, str) else json.dumps(body)
    answer = post(server.url, path, raw, timeout_s=60)
    assert 200 <= answer.status < 500, (answer.status, answer.body, raw[:300])
    assert not any(isinstance(e, dict) and "error" in e for e in answer.events), answer.events
    engine = server.server.engine
    assert engine.alive
    assert engine.blocks.num_free == engine.blocks.num_blocks


@FUZZ
@given(body=completions | garbage)
def test_fuzz_completions(server: LlmServerThread, body: Any) -> None:
    _check(server, "/v1/completions", body)


@FUZZ
@given(body=chats | garbage)
def test_fuzz_chat_completions(server: LlmServerThread, body: Any) -> None:
    _check(server, "/v1/chat/completions", body)


@FUZZ
@given(body=generates | garbage, stream=st.booleans())
def test_fuzz_generate(server: LlmServerThread, body: Any, stream: bool) -> None:
    _check(server, f"/v2/models/tiny-llm/generate{'_stream' if stream else ''}", body)
