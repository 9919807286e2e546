"""The LLM server fails closed (issue 29, items 1-11): hostile requests over loopback get a 4xx
naming the field, a failing step fails only its requests, readiness follows the engine."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from sut.llm import protocol
from sut.llm.checks import MAX_STOP_CHARS, MAX_STOP_STRINGS
from sut.llm.config import EngineConfig
from sut.llm.engine import MAX_FAILED_STEPS, LLMEngine
from sut.llm.sequence import Delta, SamplingParams
from sut.llm.server import LlmServer, LlmServerThread
from sut.server.app import serve
from sut.server.core import ServerConfig
from tests.served import ROOT, read_line, stop
from tests.sut.llm.hostile import get, open_request, post, wait_for

pytestmark = pytest.mark.functional

TOKEN = "sesame"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
COMPLETIONS = "/v1/completions"
GENERATE = "/v2/models/tiny-llm/generate"
VALID = {"prompt": "Hello", "max_tokens": 4, "temperature": 0, "ignore_eos": True}


@pytest.fixture(scope="module")
def server() -> Iterator[LlmServerThread]:
    with LlmServerThread("tiny-llm", EngineConfig(device="cpu", max_num_seqs=4),
                         ServerConfig(http_port=0, auth_token=TOKEN)) as running:
        yield running


@contextlib.contextmanager
def held_steps(engine: LLMEngine) -> Iterator[threading.Event]:
    """The engine's steps wait until the yielded gate is set (set again at the end)."""
    runner = engine.runner
    real = runner.step
    gate = threading.Event()

    def held(work: Any) -> Any:
        assert gate.wait(60)
        return real(work)

    runner.step = held  # type: ignore[method-assign]
    try:
        yield gate
    finally:
        gate.set()
        runner.step = real  # type: ignore[method-assign]


def finals(engine: LLMEngine) -> list[Delta]:
    """Collect the last delta of every request submitted from now on."""
    ended: list[Delta] = []
    submit = engine.submit

    def recording(prompt: list[int], params: Any, on_output: Any, priority: int = 0) -> int:
        def on_delta(delta: Delta) -> None:
            if delta.finished:
                ended.append(delta)
            on_output(delta)
        return submit(prompt, params, on_delta, priority)

    engine.submit = recording  # type: ignore[method-assign]
    return ended


def assert_serving(server: LlmServerThread) -> None:
    """The engine is alive and a valid request is answered with text."""
    assert server.server.engine.alive
    answer = post(server.url, COMPLETIONS, VALID, AUTH)
    assert answer.status == 200, answer.body
    assert answer.body["usage"]["completion_tokens"] == 4


# -- 1: every sampling field and token id is checked at the edge ---------------------------

@pytest.mark.parametrize(("path", "body", "field"), [
    (COMPLETIONS, '{"prompt": "hi", "max_tokens": 4, "temperature": 1e999}', "temperature"),
    (COMPLETIONS, '{"prompt": "hi", "max_tokens": 4, "temperature": NaN}', "temperature"),
    (COMPLETIONS, '{"prompt": "hi", "max_tokens": 4, "temperature": -Infinity}', "temperature"),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": 4, "top_p": 1e-300}, "top_p"),
    (COMPLETIONS, '{"prompt": "hi", "max_tokens": 4, "top_p": NaN}', "top_p"),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": 4, "temperature": 1, "seed": 2**64},
     "seed"),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": 2**70}, "max_tokens"),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": 4, "top_k": 10**400}, "top_k"),
    (COMPLETIONS, {"prompt": "hi", "max_tokens": 4, "min_tokens": 9}, "min_tokens"),
    (COMPLETIONS, {"prompt": [256, 999], "max_tokens": 4}, "prompt"),
    (COMPLETIONS, {"prompt": [256, -1], "max_tokens": 4}, "prompt"),
    (GENERATE, '{"text_input": "hi", "parameters": {"temperature": 1e999}}', "temperature"),
    (GENERATE, {"text_input": "hi", "parameters": {"top_p": 1e-300}}, "top_p"),
])
def test_hostile_sampling_values_are_400_naming_the_field(server: LlmServerThread, path: str,
                                                          body: Any, field: str) -> None:
    answer = post(server.url, path, body, AUTH)
    assert answer.status == 400 and answer.message.startswith(field), answer.body
    assert_serving(server)


@pytest.mark.parametrize("extra", [
    {"temperature": 1e308}, {"temperature": 1, "seed": 2**45},
    {"temperature": 1, "seed": -(2**44)}, {"temperature": 0.7, "top_p": 1e-9},
])
def test_extreme_but_valid_sampling_is_answered(server: LlmServerThread,
                                               extra: dict[str, Any]) -> None:
    answer = post(server.url, COMPLETIONS, {**VALID, **extra}, AUTH)
    assert answer.status == 200, answer.body
    generated = post(server.url, GENERATE, {"text_input": "hi", "parameters": {
        "max_tokens": 4, "ignore_eos": True, **extra}}, AUTH)
    assert generated.status == 200, generated.body
    assert_serving(server)


def test_a_temperature_too_small_to_divide_by_is_greedy(server: LlmServerThread) -> None:
    tiny = post(server.url, COMPLETIONS, {**VALID, "max_tokens": 12, "temperature": 1e-45},
                AUTH)
    greedy = post(server.url, COMPLETIONS, {**VALID, "max_tokens": 12}, AUTH)
    assert tiny.status == greedy.status == 200
    assert tiny.body["choices"][0]["text"] == greedy.body["choices"][0]["text"]


def test_a_failing_step_fails_only_its_requests(server: LlmServerThread) -> None:
    engine = server.server.engine
    runner = engine.runner
    real = runner.step
    calls = [0]

    def fails_once(work: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("a kernel fault")
        return real(work)

    runner.step = fails_once  # type: ignore[method-assign]
    try:
        failed = post(server.url, COMPLETIONS, VALID, AUTH)
        assert failed.status == 500 and "a kernel fault" in failed.message
        assert_serving(server)
    finally:
        runner.step = real  # type: ignore[method-assign]
    assert engine.blocks.num_free == engine.blocks.num_blocks


# -- 2: readiness reflects the engine; a stopped engine exits the process non-zero ----------

def _kill_loop(engine: LLMEngine) -> None:
    """Make the step loop itself fail (not a step): the engine stops."""
    def broken() -> Any:
        raise RuntimeError("scheduler bug")
    engine.scheduler.schedule = broken  # type: ignore[method-assign]
    engine.submit([256, 65], SamplingParams(max_tokens=2), lambda delta: None)


def test_health_and_readiness_follow_the_engine() -> None:
    with LlmServerThread("tiny-llm", EngineConfig(device="cpu"),
                         ServerConfig(http_port=0)) as running:
        assert get(running.url, "/health") == (200, b"")
        assert get(running.url, "/v2/health/ready")[0] == 200
        engine = running.server.engine
        _kill_loop(engine)
        wait_for(lambda: not engine.alive)
        status, body = get(running.url, "/v2/health/ready")
        assert status == 503 and b"scheduler bug" in body
        assert get(running.url, "/health")[0] == 503
        assert post(running.url, COMPLETIONS, VALID).status == 503


def test_serve_returns_nonzero_once_the_engine_stops() -> None:
    engine = LLMEngine.build("tiny-llm", EngineConfig(device="cpu"))
    server = LlmServer(engine, ServerConfig(http_port=0))
    lines: list[str] = []

    def announce(line: str) -> None:
        lines.append(line)
        if line.startswith("ready"):
            _kill_loop(engine)

    code = asyncio.run(asyncio.wait_for(serve(server, announce, server.failed), 120))
    assert code == 1 and lines[-1] == "ready tiny-llm"


def test_loadgen_serve_exits_3_when_the_engine_stops_and_hides_its_token() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "LLM_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "serve", "--http-port", "0", "--auth-token-env",
         "LLM_TOKEN", "--model", "causal:tests.sut.llm.causal_models:fails_after_warmup"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = "http://" + read_line(proc, 120).rsplit("http=", 1)[1]
        assert read_line(proc, 120).startswith("ready")
        with open(f"/proc/{proc.pid}/cmdline", "rb") as cmdline:
            assert TOKEN.encode() not in cmdline.read()
        assert post(url, COMPLETIONS, VALID).status == 401
        for _ in range(MAX_FAILED_STEPS):
            answer = post(url, COMPLETIONS, VALID, AUTH)
            assert answer.status in (500, 503), answer.body
        assert proc.wait(60) == 3
        assert "failed" in (proc.stderr.read() if proc.stderr else "")
    finally:
        stop(proc, 10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


# -- 3: stop strings are bounded ------------------------------------------------------------

def test_stop_strings_are_bounded_in_count_and_length(server: LlmServerThread) -> None:
    many = post(server.url, COMPLETIONS, {**VALID, "stop": ["zq"] * 200_000}, AUTH)
    assert many.status == 400 and many.message.startswith("stop")
    long = post(server.url, COMPLETIONS, {**VALID, "stop": ["z" * (MAX_STOP_CHARS + 1)]}, AUTH)
    assert long.status == 400 and long.message.startswith("stop")
    most = post(server.url, COMPLETIONS, {**VALID, "stop": [
        f"{i:03d}" + "q" * (MAX_STOP_CHARS - 3) for i in range(MAX_STOP_STRINGS)]}, AUTH)
    assert most.status == 200


# -- 4: length before tokenising, big bodies off the event loop ------------------------------

def test_a_long_prompt_is_refused_before_it_is_tokenised(
        server: LlmServerThread, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, str]] = []
    real = protocol.encode

    def encode(text: str, bos: bool = True) -> list[int]:
        seen.append((len(text), threading.current_thread().name))
        return real(text, bos)

    monkeypatch.setattr(protocol, "encode", encode)
    limit = server.server.engine.max_model_len
    long = post(server.url, COMPLETIONS, {**VALID, "prompt": "x" * 2_000_000}, AUTH)
    assert long.status == 400 and "max_model_len" in long.message
    chat = post(server.url, "/v1/chat/completions", {"messages": [
        {"role": "user", "content": "y" * 2_000_000}]}, AUTH)
    assert chat.status == 400 and "max_model_len" in chat.message
    assert all(length < limit for length, _ in seen)
    padded = post(server.url, COMPLETIONS, {**VALID, "user": "p" * 200_000}, AUTH)
    assert padded.status == 200
    assert seen and seen[-1][1] != "llm-server"  # a big body was tokenised off the loop


# -- 5: a client that goes away cancels its request on every route --------------------------

@pytest.mark.parametrize(("path", "body"), [
    (COMPLETIONS, {"prompt": "x", "max_tokens": 400, "ignore_eos": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}],
                              "max_tokens": 400, "ignore_eos": True}),
    (GENERATE, {"text_input": "x", "parameters": {"max_tokens": 400, "ignore_eos": True}}),
    (COMPLETIONS, {"prompt": "x", "max_tokens": 400, "ignore_eos": True, "stream": True}),
])
def test_a_client_that_goes_away_is_cancelled(server: LlmServerThread, path: str,
                                              body: dict[str, Any]) -> None:
    engine = server.server.engine
    submit = engine.submit
    ended = finals(engine)
    try:
        with held_steps(engine) as gate:
            sock = open_request(server.url, path, body, AUTH)
            wait_for(lambda: engine.num_waiting + engine.num_running > 0)
            sock.close()  # the client leaves while its request waits or runs
            wait_for(lambda: bool(engine._cancels))
            gate.set()
        wait_for(lambda: bool(ended))
    finally:
        engine.submit = submit  # type: ignore[method-assign]
    assert ended[0].finish_reason == "abort" and ended[0].output_tokens < 400
    wait_for(lambda: engine.blocks.num_free == engine.blocks.num_blocks)


# -- 6: a non-ASCII Authorization header is a 401 and one log line --------------------------

def test_a_non_ascii_authorization_header_is_401(
        server: LlmServerThread, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        answer = post(server.url, COMPLETIONS, VALID, {"Authorization": b"Bearer \xe9\xff"})
    assert answer.status == 401 and answer.body["error"]["type"] == "AuthenticationError"
    lines = [r for r in caplog.records if r.name.startswith("sut.")]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert lines[0].exc_info is None and "not ASCII" in lines[0].getMessage()


# -- 7: lone surrogates and deep nesting are 400 --------------------------------------------

@pytest.mark.parametrize(("path", "body", "field"), [
    (COMPLETIONS, '{"prompt": "a\\ud800b"}', "prompt"),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "\\ud800"}]}',
     "messages[0].content"),
    ("/v1/chat/completions", '{"messages": [{"role": "\\udfff", "content": "hi"}]}',
     "messages[0].role"),
    ("/v1/chat/completions",
     '{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\ud800"}]}]}',
     "messages[0].content"),
    (GENERATE, '{"text_input": "\\ud800"}', "text_input"),
    (COMPLETIONS, '{"prompt": "hi", "stop": ["\\ud800"]}', "stop"),
    (COMPLETIONS, "[" * 100_000 + "]" * 100_000, "the body"),
    (COMPLETIONS, '{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}", "the body"),
    (GENERATE, '{"text_input": "hi", "parameters": ' + "{\"a\":" * 50_000 + "1"
     + "}" * 50_001, "the body"),
])
def test_lone_surrogates_and_deep_json_are_400(server: LlmServerThread, path: str, body: str,
                                               field: str) -> None:
    answer = post(server.url, path, body, AUTH)
    assert answer.status == 400 and answer.message.startswith(field), answer.body
    assert_serving(server)


# -- 8: unsupported fields are refused, their defaults accepted ------------------------------

@pytest.mark.parametrize(("extra", "status"), [
    ({"logprobs": 1}, 400), ({"logprobs": True}, 400), ({"top_logprobs": 2}, 400),
    ({"echo": True}, 400), ({"best_of": 2}, 400), ({"n": 3}, 400),
    ({"logprobs": None, "echo": False, "best_of": 1, "n": 1, "top_logprobs": 0}, 200),
])
def test_unsupported_fields_are_refused(server: LlmServerThread, extra: dict[str, Any],
                                        status: int) -> None:
    answer = post(server.url, COMPLETIONS, {**VALID, **extra}, AUTH)
    assert answer.status == status, answer.body
    if status == 400:
        assert answer.message.startswith(next(iter(extra)))
        assert "not supported" in answer.message


# -- 9, 11: 413 typed; max_inflight and request_timeout_s honoured --------------------------

@pytest.fixture(scope="module")
def bounded() -> Iterator[LlmServerThread]:
    config = ServerConfig(http_port=0, max_body_bytes=4096, max_inflight=1,
                          request_timeout_s=2.0)
    with LlmServerThread("tiny-llm", EngineConfig(device="cpu"), config) as running:
        yield running


def test_a_body_over_the_bound_is_413_with_its_type(bounded: LlmServerThread) -> None:
    answer = post(bounded.url, COMPLETIONS, {**VALID, "prompt": "x" * 5000})
    assert answer.status == 413 and answer.body["error"]["type"] == "RequestTooLargeError"


def test_max_inflight_is_honoured(bounded: LlmServerThread) -> None:
    engine, state = bounded.server.engine, bounded.server.state
    with held_steps(engine), contextlib.closing(
            open_request(bounded.url, COMPLETIONS, {**VALID, "stream": True})):
        wait_for(lambda: state.inflight == 1)
        second = post(bounded.url, COMPLETIONS, VALID)
        assert second.status == 429 and "in flight" in second.message
    wait_for(lambda: state.inflight == 0 and engine.num_running == 0)


def test_request_timeout_is_honoured_and_cancels(bounded: LlmServerThread) -> None:
    engine = bounded.server.engine
    long = {"prompt": "x", "max_tokens": 400, "ignore_eos": True}
    with held_steps(engine):
        answer = post(bounded.url, COMPLETIONS, long)
    assert answer.status == 504 and answer.body["error"]["type"] == "TimeoutError"
    with held_steps(engine):
        streamed = post(bounded.url, COMPLETIONS, {**long, "stream": True})
    assert streamed.status == 200 and streamed.events[-1] == "[DONE]"
    assert streamed.events[-2]["error"]["code"] == 504
    wait_for(lambda: engine.num_running == 0 and engine.num_waiting == 0)
    assert engine.blocks.num_free == engine.blocks.num_blocks
