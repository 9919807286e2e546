"""`loadgen run --sut openai://...` against `loadgen serve --model tiny-llm`, both ours, with the
adapter's defaults (`max_in_flight` 256: one keep-alive connection each) and the server's
(no request timeout for an LLM): every query issued finishes, none failed or left unfinished,
while the server queues a burst of them behind its 4 seats.

The server is a subprocess on loopback (port 0), stopped by pid; the run is a short dev run.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loadgen.api import run_test
from loadgen.plan.settings import settings_from_mapping
from tests.served import serve_tiny_llm

pytestmark = pytest.mark.functional

TOKENS = 8


@pytest.fixture(scope="module")
def address() -> Iterator[str]:
    """`host:port` of `loadgen serve --model tiny-llm` with its default request bounds."""
    with serve_tiny_llm("--max-num-seqs", "4", grace_s=30) as (_, served):
        yield served


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_a_run_with_the_default_in_flight_cap_finishes_every_query(address: str,
                                                                   endpoint: str) -> None:
    settings = settings_from_mapping({
        "scenario": "Server", "preset": "dev", "target_qps": 20.0, "min_duration_s": 1.0,
        "min_query_count": 24, "warmup_s": 0.0, "tokenizer": "bytes", "input_tokens": 24,
        "output_tokens": TOKENS, "fixed_output": True, "target_latency_ms": 30_000.0,
        "max_issue_lag_ms": 500.0})
    result = run_test(settings, f"openai://{address}/tiny-llm?endpoint={endpoint}")
    stats = result.stats
    assert stats.errors == 0, stats.errors_detail
    assert stats.unfinished == 0
    tokens = stats.token_stats
    assert tokens is not None and tokens.tokens.requests >= 24
    assert tokens.tokens.output_total == TOKENS * tokens.tokens.requests
    assert result.sut["max_in_flight"] == 256
