"""Token runs end to end against a scripted streaming server process: every metric equals the
script within 0.2 ms plus the measured loopback overhead, and a stall shows in TTFT.

The server (`stream_server`, its own process on loopback, stopped by pid) answers each
request on a script (TTFT, inter-chunk gap, tokens per chunk, reasoning, usage) and logs
when each chunk left (`perf_counter_ns`, the same CLOCK_MONOTONIC the client stamps with).
One stream at a time (SingleStream) keeps the server's log in the client's order, so
each chunk's read stamp is matched with its write: the loopback overhead is measured, not
assumed. The tolerance of each check is 0.2 ms + that overhead + how far the server's own
timer strayed from the script (also measured); on this loaded box both are milliseconds at
worst, far below the scripted gaps the checks tell apart.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.adapters.openai import OpenAISut
from loadgen.adapters.streaming import Exchange
from loadgen.adapters.tokens import TokenStream
from loadgen.api import run_test
from loadgen.plan.settings import settings_from_mapping
from tests.served import port_server

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[3]
MS = 1_000_000
SLACK_NS = 200_000  # the 0.2 ms of the bound


def stream_server(log: Path, *args: str) -> contextlib.AbstractContextManager[int]:
    """The scripted server's port; it lives at most 120 s and is stopped by pid."""
    return port_server("tests.loadgen.llm_wire.stream_server", "--log", str(log), *args)


class Capturing(OpenAISut):
    """The adapter, keeping every finished stream for the checks."""

    def __init__(self, spec: str) -> None:
        endpoint = OpenAISut.from_spec(spec).endpoint
        super().__init__(endpoint)
        self.kept: list[TokenStream] = []

    def finished(self, exchange: Exchange, now_ns: int) -> None:
        self.kept.append(exchange.stream)
        super().finished(exchange, now_ns)


def settings(tokens: int, **more: Any) -> Any:
    return settings_from_mapping({
        "preset": "dev", "min_duration_s": 1.0, "min_query_count": 20, "input_tokens": 16,
        "output_tokens": tokens, "fixed_output": True, "max_issue_lag_ms": 50.0, **more})


CASES = {  # endpoint, options, chunks, tokens per chunk, reasoning chunks, server flags
    "chat-usage-reasoning": ("chat", "", 8, 1, 2, ["--usage"]),
    "completions-no-usage-3-per-chunk": ("completions", "", 6, 3, 0, []),
    "chat-continuous-usage-2-per-chunk": ("chat", "&continuous_usage=1", 6, 2, 0,
                                          ["--usage", "--continuous"]),
}
TTFT_MS, GAP_MS = 30.0, 8.0


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_metric_equals_the_script(case: str, tmp_path: Path) -> None:
    endpoint, options, chunks, per_chunk, reasoning, flags = CASES[case]
    log = tmp_path / "server.jsonl"
    with stream_server(log, "--ttft-ms", str(TTFT_MS), "--gap-ms", str(GAP_MS),
                       "--chunks", str(chunks), "--per-chunk", str(per_chunk),
                       "--reasoning", str(reasoning), *flags) as port:
        sut = Capturing(f"openai://127.0.0.1:{port}/m?endpoint={endpoint}&max_in_flight=1&preflight=0"
                        f"{options}")
        run_test(settings(chunks * per_chunk, scenario="SingleStream"), sut,
                 out_dir=tmp_path / "run")
    doc = json.loads((tmp_path / "run" / "result.json").read_text())
    served = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(served) == len(sut.kept) >= 20

    overhead = server_jitter = 0
    for answer, stream in zip(served, sut.kept, strict=True):
        writes = answer["writes"]
        assert len(stream.chunk_ns) == chunks == len(writes)
        lags = [read - wrote for read, wrote in zip(stream.chunk_ns, writes, strict=True)]
        assert min(lags) >= 0  # a read never precedes its write
        overhead = max(overhead, *lags)
        due = [answer["recv"] + int((TTFT_MS + i * GAP_MS) * MS) for i in range(chunks)]
        server_jitter = max(server_jitter, *(abs(w - d) for w, d in zip(writes, due, strict=True)))
    tol = SLACK_NS + overhead + server_jitter
    print(f"{case}: loopback overhead max {overhead / 1e3:.0f} us, server timer jitter max "
          f"{server_jitter / 1e3:.0f} us")

    tokens = chunks * per_chunk
    gap, ttft = GAP_MS * MS, TTFT_MS * MS
    itl, tpot = doc["itl_ns"], doc["tpot_ns"]
    assert itl["count"] == (tokens - 1) * len(served)
    assert itl["max"] <= gap + 2 * tol
    if per_chunk == 1:
        assert itl["min"] >= gap - 2 * tol
    else:  # a chunk of k tokens: its gap once, then k - 1 zero gaps
        assert itl["min"] == 0
    expected_tpot = (chunks - 1) * gap / (tokens - 1)
    assert abs(tpot["p50"] - expected_tpot) <= 2 * tol / (tokens - 1) + expected_tpot * 0.01
    ttft_sent = doc["ttft_ns"]["from_send"]
    assert ttft - SLACK_NS <= ttft_sent["min"] and ttft_sent["p50"] <= ttft + 2 * tol
    ttfo_sent = doc["ttfo_ns"]["from_send"]
    assert abs(ttfo_sent["p50"] - (ttft + reasoning * gap)) <= 2 * tol
    e2e_sent = doc["e2e_ns"]["from_send"]
    assert abs(e2e_sent["p50"] - (ttft + (chunks - 1) * gap)) <= 2 * tol
    assert doc["tokens"]["output_total"] == tokens * len(served)
    # the server's prompt_tokens, or without usage the workload's count: every request has one
    assert doc["tokens"]["input_total"] == 16 * doc["tokens"]["requests"]
    assert doc["tokens"]["input_known"] == doc["tokens"]["requests"]


def test_a_stalled_server_shows_its_stall_in_ttft_from_the_schedule(tmp_path: Path) -> None:
    """Coordinated omission: requests scheduled while the server stalls wait, one at a time
    behind it, and each one's TTFT from its schedule carries that wait (a client timing from
    the send, or closing the loop, would show one slow request)."""
    log = tmp_path / "server.jsonl"
    stall_ms = 400.0
    with stream_server(log, "--ttft-ms", "5", "--gap-ms", "2", "--chunks", "2",
                       "--stall-at", "10", "--stall-ms", str(stall_ms)) as port:
        result_dir = tmp_path / "run"
        run_test(settings(2, scenario="Server", target_qps=40.0, min_duration_s=1.5,
                          min_query_count=60, use_token_latencies=True, ttft_latency_ms=2000.0,
                          tpot_latency_ms=500.0, target_latency_percentile=90.0),
                 f"openai://127.0.0.1:{port}/m?max_in_flight=1", out_dir=result_dir)
    doc = json.loads((result_dir / "result.json").read_text())
    ttft = doc["ttft_ns"]
    assert ttft["max"] >= stall_ms * MS
    # ~16 requests are scheduled during the stall: a tenth of the run waits over 100 ms
    assert ttft["p90"] >= 100 * MS
