"""loadgen's openai:// adapter against an OpenAI-compatible streaming server on another stack
(Starlette on uvicorn/h11, SSE through a StreamingResponse, chunked by uvicorn). The server
runs as a subprocess on loopback, bounded in time, stopped by pid."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.adapters.openai import OpenAISut
from loadgen.api import run_test
from loadgen.plan.settings import settings_from_mapping
from tests.loadgen.llm_wire.scripted import run_streams
from tests.served import port_server

pytest.importorskip("uvicorn", reason="needs uvicorn (the dev extra)")
pytest.importorskip("starlette", reason="needs starlette (the dev extra)")

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 12


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    """The server's port (stopped by pid at the end of the module)."""
    with port_server("tests.thirdparty.openai_starlette_server") as port:
        yield port


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
@pytest.mark.parametrize("scenario", ["SingleStream", "Server"])
def test_token_runs_are_valid(port: int, endpoint: str, scenario: str) -> None:
    settings = settings_from_mapping({
        "scenario": scenario, "preset": "dev", "min_duration_s": 0.5, "min_query_count": 50,
        "target_qps": 40.0, "use_token_latencies": scenario == "Server",  # 44 pass at p90
        "ttft_latency_ms": 1000.0, "tpot_latency_ms": 200.0, "target_latency_percentile": 90.0,
        "input_tokens": 8, "output_tokens": TOKENS, "fixed_output": True,
        "max_issue_lag_ms": 250.0})  # a shared, loaded test machine
    result = run_test(settings, f"openai://127.0.0.1:{port}/m?endpoint={endpoint}")
    assert result.valid, (result.verdict.codes, result.verdict.reasons)
    tokens = result.stats.token_stats
    assert tokens is not None
    assert tokens.tokens.output_total == TOKENS * tokens.tokens.requests
    assert tokens.latencies["itl_ns"].summary.count == (TOKENS - 1) * tokens.tokens.requests


def test_the_servers_error_shape_is_the_failures_detail(port: int) -> None:
    async def go() -> None:
        sut = OpenAISut.from_spec(f"openai://127.0.0.1:{port}/other?max_in_flight=1")
        sink, _ = await run_streams(sut)
        _, kind, detail, stream = sink.failures[0]
        assert kind == "http_404" and stream is None
        assert detail == "HTTP 404 Not Found: {\"message\": \"The model `other` does not " \
            "exist.\", \"type\": \"invalid_request_error\", \"param\": null, " \
            "\"code\": \"model_not_found\"}"
    asyncio.run(go())


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_multi_turn_sessions_carry_their_history(port: int, endpoint: str) -> None:
    """The server counts each request's words as its prompt_tokens: turn k of a session
    carries every earlier prompt (8 words) and answer (12 " tok"), so it reports
    8k + 12(k - 1) tokens: 8, 28, 48 for three turns."""
    settings = settings_from_mapping({
        "scenario": "Server", "preset": "dev", "min_duration_s": 0.5, "min_query_count": 10,
        "target_qps": 20.0, "target_latency_ms": 5000.0, "input_tokens": 8,
        "output_tokens": TOKENS, "fixed_output": True, "turns": 3, "think_time_ms": 10.0,
        "max_issue_lag_ms": 250.0})
    result = run_test(settings, f"openai://127.0.0.1:{port}/m?endpoint={endpoint}")
    ts = result.stats.token_stats
    assert ts is not None and not result.stats.errors
    sessions = ts.turns["1"].count
    assert sessions >= 10 and ts.turns["3"].count == sessions
    assert ts.tokens.requests == 3 * sessions
    assert ts.tokens.input_total == (8 + 28 + 48) * sessions
