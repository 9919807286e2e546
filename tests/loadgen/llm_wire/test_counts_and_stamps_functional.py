"""Measured right against real servers: the tiny-llm server with `stream_interval=4` (on a
thread; `loadgen serve --stream-interval 4` runs the same server) sends 4 tokens a chunk,
which the client's `approx` tokenizer counts otherwise, and each request still yields N - 1
ITL values; with `max_in_flight` below the offered load, the
send stamp is taken when a request goes on the wire, not when it is queued."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from loadgen.adapters.openai import OpenAISut
from loadgen.api import run_test
from loadgen.plan.settings import settings_from_mapping
from loadgen.record.hostload import sample_host
from sut.llm.config import EngineConfig
from sut.llm.server import LlmServerThread
from sut.server.core import ServerConfig
from tests.fairness import skip_if_busy_since
from tests.loadgen.llm_wire.scripted import chat_chunk, run_streams, scripted, sse_response

pytestmark = pytest.mark.functional


def test_itl_has_n_minus_one_values_when_chunks_carry_four_tokens(tmp_path: Path) -> None:
    with LlmServerThread("tiny-llm", EngineConfig(device="cpu", stream_interval=4),
                         ServerConfig(http_port=0)) as server:
        result = run_test(settings_from_mapping({
            "scenario": "SingleStream", "preset": "dev", "min_duration_s": 0.5,
            "min_query_count": 12, "input_tokens": 16, "output_tokens": 33,
            "fixed_output": True}),
            f"openai://127.0.0.1:{server.server.http_port}/tiny-llm?tokenizer=approx"
            "&max_in_flight=1", out_dir=tmp_path / "run")
    ts = result.stats.token_stats
    assert ts is not None and ts.tokens.requests >= 12 and ts.tokens.failed == 0
    assert ts.tokens.output_total == 33 * ts.tokens.requests  # the server's usage
    assert ts.tokens.discrepancy.mismatched > 0  # the client counts 4-token chunks otherwise
    itl, tpot = ts.latency("itl_ns").summary, ts.latency("tpot_ns").summary
    assert itl.count == ts.tokens.output_total - ts.tokens.requests  # N - 1 each
    assert abs(itl.mean - tpot.mean) <= 0.05 * tpot.mean + 50_000


@pytest.mark.serial  # times a 250 ms answer to the send; skips on a loaded host
def test_a_request_queued_for_a_connection_is_stamped_when_sent() -> None:
    async def go() -> None:
        answer = [0.25, *sse_response([chat_chunk(" a"), chat_chunk(" b")])]
        host = sample_host()
        async with scripted([answer, answer]) as server:
            sut = OpenAISut.from_spec(f"openai://127.0.0.1:{server.port}/m?max_in_flight=1")
            sink, issued = await run_streams(sut, count=2)
        first_done, _ = sink.streams[0]
        _, second = sink.streams[1]
        assert second.sent_ns is not None
        assert second.sent_ns >= first_done  # it waited for the one connection
        assert second.sent_ns - issued[1] >= 200_000_000  # the queue wait is not "from send"
        first_chunk_ns = second.chunk_ns[0] - second.sent_ns
        if first_chunk_ns >= 600_000_000:  # the server answers after 250 ms
            skip_if_busy_since(host, f"first chunk {first_chunk_ns / 1e6:.0f} ms after the send")
        assert first_chunk_ns < 600_000_000
    asyncio.run(asyncio.wait_for(go(), 30))
