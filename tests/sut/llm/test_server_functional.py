"""The LLM server over loopback HTTP: SSE format, non-streamed answers, errors, cancel, 429."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from sut.llm.config import EngineConfig
from sut.llm.reference import greedy_decode
from sut.llm.server import LlmServerThread
from sut.llm.tokenizer import chat_prompt, decode, encode
from sut.server.core import ServerConfig

pytestmark = pytest.mark.functional

TOKEN = "sesame"


@pytest.fixture(scope="module")
def server() -> Iterator[LlmServerThread]:
    with LlmServerThread("tiny-llm", EngineConfig(device="cpu", max_num_seqs=4),
                         ServerConfig(http_port=0, auth_token=TOKEN)) as running:
        yield running


def _call(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 120))


async def _post(url: str, body: Any, token: str | None = TOKEN) -> tuple[int, Any, list[Any]]:
    """Status, the JSON body (non-streamed) and the SSE events (streamed, `[DONE]` as str)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as session, session.post(
            url, data=body if isinstance(body, str) else json.dumps(body),
            headers=headers) as response:
        if response.content_type != "text/event-stream":
            return response.status, await response.json(), []
        raw = (await response.read()).decode()
    assert raw.endswith("\n\n")
    events = []
    for block in raw.split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        data = block[len("data: "):]
        events.append(data if data == "[DONE]" else json.loads(data))
    return response.status, None, events


def _greedy(server: LlmServerThread, prompt: list[int], max_tokens: int) -> str:
    model = server.server.engine.runner.model
    return decode(greedy_decode(model, prompt, max_tokens, ignore_eos=True))


def timings_cached(content: list[dict[str, Any]]) -> int:
    """The cached prompt tokens the last content chunk's server timings report."""
    return int(content[-1]["timings"]["cached_tokens"])


def test_streamed_chat_has_role_content_finish_usage_and_done(server: LlmServerThread) -> None:
    messages = [{"role": "user", "content": "Tell me a story"}]
    status, _, events = _call(_post(f"{server.url}/v1/chat/completions", {
        "model": "tiny-llm", "messages": messages, "max_tokens": 12, "temperature": 0,
        "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}))
    assert status == 200 and events[-1] == "[DONE]"
    role, *content, usage_chunk, _ = events
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(e["object"] == "chat.completion.chunk" for e in events[:-1])
    assert [e["choices"][0]["finish_reason"] for e in content] == [None] * 11 + ["length"]
    text = "".join(e["choices"][0]["delta"]["content"] for e in content)
    prompt = encode(chat_prompt(messages))
    assert text == _greedy(server, prompt, 12)
    assert usage_chunk["choices"] == [] and usage_chunk["usage"] == {
        "prompt_tokens": len(prompt), "completion_tokens": 12, "total_tokens": len(prompt) + 12,
        "prompt_tokens_details": {"cached_tokens": timings_cached(content)}}
    timings = content[-1]["timings"]
    assert timings["output_tokens"] == 12 and timings["prefill_ns"] > 0


def test_streamed_completion_with_continuous_usage(server: LlmServerThread) -> None:
    status, _, events = _call(_post(f"{server.url}/v1/completions", {
        "model": "tiny-llm", "prompt": "Once upon", "max_tokens": 6, "temperature": 0,
        "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}}))
    assert status == 200 and events[-1] == "[DONE]"
    chunks = events[:-2]
    assert [c["usage"]["completion_tokens"] for c in chunks] == [1, 2, 3, 4, 5, 6]
    assert all(c["object"] == "text_completion" for c in chunks)
    assert "".join(c["choices"][0]["text"] for c in chunks) == _greedy(
        server, encode("Once upon"), 6)


def test_non_streamed_answers_carry_usage_and_timings(server: LlmServerThread) -> None:
    status, body, _ = _call(_post(f"{server.url}/v1/completions", {
        "model": "tiny-llm", "prompt": "Hello", "max_tokens": 5, "temperature": 0,
        "ignore_eos": True}))
    assert status == 200 and body["usage"] == {
        "prompt_tokens": 6, "completion_tokens": 5, "total_tokens": 11,
        "prompt_tokens_details": {"cached_tokens": 0}}  # under one block: nothing cached
    assert body["choices"][0]["text"] == _greedy(server, encode("Hello"), 5)
    assert set(body["timings"]) >= {"queue_ns", "prefill_ns", "decode_ns"}
    status, chat, _ = _call(_post(f"{server.url}/v1/chat/completions", {
        "model": "tiny-llm", "messages": [{"role": "user", "content": "Hi"}],
        "max_completion_tokens": 3, "ignore_eos": True}))
    assert status == 200 and chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["role"] == "assistant"
    assert chat["usage"]["completion_tokens"] == 3


def test_oip_generate_and_generate_stream(server: LlmServerThread) -> None:
    base = f"{server.url}/v2/models/tiny-llm"
    body = {"text_input": "Hello", "parameters": {"max_tokens": 4, "ignore_eos": True}}
    status, whole, _ = _call(_post(f"{base}/generate", body))
    assert status == 200 and whole["text_output"] == _greedy(server, encode("Hello"), 4)
    status, _, events = _call(_post(f"{base}/generate_stream", body))
    assert status == 200 and "[DONE]" not in events
    assert "".join(e["text_output"] for e in events) == whole["text_output"]
    assert events[-1]["finish_reason"] == "length" and "timings" in events[-1]
    status, error, _ = _call(_post(f"{server.url}/v2/models/nope/generate", body))
    assert status == 404 and "nope" in error["error"]["message"]


@pytest.mark.parametrize(("path", "body", "status", "words"), [
    ("/v1/completions", "{not json", 400, "not JSON"),
    ("/v1/completions", {"model": "gpt-4", "prompt": "x"}, 404, "gpt-4"),
    ("/v1/completions", {"prompt": 5}, 400, "prompt"),
    ("/v1/completions", {"prompt": "x", "max_tokens": "many"}, 400, "max_tokens"),
    ("/v1/completions", {"prompt": "x", "n": 2}, 400, "n:"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages"),
    ("/v1/completions", {"prompt": "x" * 600}, 400, "max_model_len"),
    ("/v1/embeddings", {}, 404, "Not Found"),
])
def test_errors_before_the_stream_are_json(server: LlmServerThread, path: str, body: Any,
                                           status: int, words: str) -> None:
    got, answer, _ = _call(_post(f"{server.url}{path}", body))
    assert got == status and words in answer["error"]["message"]
    assert answer["error"]["code"] == status


def test_bearer_token_health_models_metrics_and_trace(server: LlmServerThread) -> None:
    status, answer, _ = _call(_post(f"{server.url}/v1/completions", {"prompt": "x"},
                                    token=None))
    assert status == 401 and answer["error"]["type"] == "AuthenticationError"

    async def get(path: str, token: str | None = TOKEN) -> tuple[int, str]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with aiohttp.ClientSession() as session, session.get(
                f"{server.url}{path}", headers=headers) as response:
            return response.status, await response.text()

    assert _call(get("/v2/health/ready", token=None))[0] == 200
    status, models = _call(get("/v1/models"))
    assert status == 200 and json.loads(models)["data"][0]["id"] == "tiny-llm"
    _, metrics = _call(get("/metrics"))
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:kv_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:inter_token_latency_seconds_bucket",
                 "vllm:time_per_output_token_seconds_bucket",
                 "vllm:request_time_per_output_token_seconds_bucket",
                 "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:request_queue_time_seconds_bucket",
                 "vllm:request_prefill_time_seconds_bucket",
                 "vllm:request_decode_time_seconds_bucket", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total"):
        assert f"{name}{{" in metrics, name
    done, _, _ = _call(_post(f"{server.url}/v1/completions", {"prompt": "x", "max_tokens": 2}))
    assert done == 200  # the engine has stepped, whichever tests ran before this one
    status, steps = _call(get("/debug/steps?last=3"))
    records = json.loads(steps)["steps"]
    assert status == 200 and 0 < len(records) <= 3
    assert {"batched_tokens", "decode_seqs", "kv_usage", "forward_ns"} <= set(records[0])


def test_a_client_that_goes_away_frees_its_blocks(server: LlmServerThread) -> None:
    engine = server.server.engine

    async def leave_early() -> None:
        async with aiohttp.ClientSession() as session, session.post(
                f"{server.url}/v1/completions", headers={"Authorization": f"Bearer {TOKEN}"},
                json={"prompt": "x", "max_tokens": 400, "ignore_eos": True,
                      "stream": True}) as response:
            await response.content.readuntil(b"\n\n")
            await response.content.readuntil(b"\n\n")
            assert engine.blocks.num_free < engine.blocks.num_blocks
        # leaving the block closes the connection mid-stream

    _call(leave_early())
    deadline = time.monotonic() + 60
    while engine.num_running and time.monotonic() < deadline:
        time.sleep(0.05)  # the server notices at its next write; bounded
    assert engine.num_running == 0
    assert engine.blocks.num_free == engine.blocks.num_blocks


def test_overload_is_429_before_the_stream() -> None:
    config = EngineConfig(device="cpu", max_num_seqs=1, max_waiting=1)
    with LlmServerThread("tiny-llm", config, ServerConfig(http_port=0)) as running:
        runner = running.server.engine.runner
        real = runner.step
        gate = threading.Event()

        def held(work: Any) -> Any:  # the engine thread waits here until two 429s came back
            assert gate.wait(60)
            return real(work)

        runner.step = held  # type: ignore[method-assign]

        async def burst() -> list[int]:
            refused = [0]
            async with aiohttp.ClientSession() as session:
                async def one() -> int:
                    async with session.post(f"{running.url}/v1/completions", json={
                            "prompt": "x", "max_tokens": 2, "stream": True}) as response:
                        if response.status == 429:
                            body = await response.json()
                            assert "wait" in body["error"]["message"]
                            refused[0] += 1
                            if refused[0] == 2:
                                gate.set()
                        await response.read()
                        return response.status
                return list(await asyncio.gather(*(one() for _ in range(4))))

        statuses = _call(burst())
    assert statuses.count(429) >= 2 and 200 in statuses


def test_an_error_during_the_stream_is_in_band() -> None:
    with LlmServerThread("tiny-llm", EngineConfig(device="cpu"),
                         ServerConfig(http_port=0)) as running:
        runner = running.server.engine.runner
        real = runner.step
        calls = [0]

        def failing(work: Any) -> Any:
            calls[0] += 1
            if calls[0] > 3:
                raise RuntimeError("device lost")
            return real(work)

        runner.step = failing  # type: ignore[method-assign]
        status, _, events = _call(_post(f"{running.url}/v1/completions", {
            "prompt": "x", "max_tokens": 50, "ignore_eos": True, "stream": True}, token=None))
    assert status == 200
    assert events[-2]["error"]["message"].endswith("device lost") and events[-1] == "[DONE]"
    assert any("choices" in e for e in events[:-2])


def _metric_value(text: str, name: str) -> float:
    """The value of an unlabelled-but-for-model series `name` in Prometheus text."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    raise AssertionError(f"{name} not exposed")


def test_cached_tokens_in_usage_agree_with_the_prefix_cache_counters(
        server: LlmServerThread) -> None:
    async def metrics() -> str:
        async with aiohttp.ClientSession() as session, session.get(
                f"{server.url}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
            return await r.text()

    before = _call(metrics())
    shared = "You are a careful assistant who answers briefly. " * 3
    usages = []
    for question in ("Why is the sky blue?", "What is a prime?", "Name a colour."):
        status, answer, _ = _call(_post(f"{server.url}/v1/completions", {
            "prompt": shared + question, "max_tokens": 3, "temperature": 0,
            "ignore_eos": True}))
        assert status == 200
        usages.append(answer["usage"])
    after = _call(metrics())
    cached = [u["prompt_tokens_details"]["cached_tokens"] for u in usages]
    assert cached[0] >= 0 and min(cached[1:]) >= len(encode(shared)) // 16 * 16 - 16 > 0
    delta = {name: _metric_value(after, name) - _metric_value(before, name)
             for name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total",
                          "vllm:request_time_per_output_token_seconds_count",
                          "vllm:time_per_output_token_seconds_count")}
    assert delta["vllm:prefix_cache_hits_total"] == sum(cached)
    assert delta["vllm:prefix_cache_queries_total"] == sum(u["prompt_tokens"] for u in usages)
    assert delta["vllm:request_time_per_output_token_seconds_count"] == 3  # per request
    assert delta["vllm:time_per_output_token_seconds_count"] == 3 * 2  # per token gap
