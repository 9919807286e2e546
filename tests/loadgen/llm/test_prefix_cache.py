"""Prefix-cache workloads against the built-in LLM server (`loadgen serve --model tiny-llm`,
in process): a Mooncake replay's achieved hit rate equals the one its `hash_ids` give, and a
prefix-cache experiment is VALID on target and INVALID (`cache_hit_rate`) off it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.api import run_test
from loadgen.plan.settings import settings_from_mapping
from sut.llm.config import EngineConfig
from sut.llm.server import LlmServerThread
from sut.server.core import ServerConfig

pytestmark = pytest.mark.functional

BLOCK = 32  # a multiple of the server's 16-token KV block, so trace blocks are whole KV blocks
# (hash_ids, input_length): chained ids as in the published trace; lengths in whole blocks
ROWS = [((0, 1, 2), 96), ((0, 1), 64), ((0, 1, 3, 4), 128), ((5,), 32), ((0, 1, 2, 6), 128),
        ((5, 7), 64), ((8, 9), 64), ((0, 1, 3), 96), ((8,), 32), ((0, 10), 64)]
COMMON = {"scenario": "Server", "preset": "dev", "tokenizer": "bytes", "max_issue_lag_ms": 200.0,
          "use_token_latencies": True, "ttft_latency_ms": 5000.0, "tpot_latency_ms": 1000.0,
          "target_latency_percentile": 90.0}


@pytest.fixture(scope="module")
def openai_url() -> Iterator[str]:
    with LlmServerThread("tiny-llm", EngineConfig(device="cpu", max_num_seqs=4),
                         ServerConfig(http_port=0)) as server:
        port = server.server.http_port  # no preflight: its request would prime the cache
        yield f"openai://127.0.0.1:{port}/tiny-llm?endpoint=completions&preflight=0"


def _mooncake(tmp_path: Path) -> Path:
    path = tmp_path / "mooncake.jsonl"
    path.write_text("".join(json.dumps({"timestamp": 250 * i, "input_length": length,
                                        "output_length": 4, "hash_ids": list(ids)}) + "\n"
                            for i, (ids, length) in enumerate(ROWS)))
    return path


def _ideal_cached() -> int:
    seen: set[int] = set()
    cached = 0
    for ids, _ in ROWS:
        lead = next((n for n, h in enumerate(ids) if h not in seen), len(ids))
        cached += lead * BLOCK
        seen.update(ids)
    return cached


def test_a_mooncake_replay_hits_what_its_hash_ids_say(tmp_path: Path, openai_url: str) -> None:
    settings = COMMON | {"arrival": "trace", "trace_file": str(_mooncake(tmp_path)),
                         "trace_format": "mooncake", "trace_block_tokens": BLOCK,
                         "min_duration_s": 0.0, "min_query_count": 1, "fixed_output": True}
    result = run_test(settings_from_mapping(settings), openai_url, out_dir=tmp_path)
    doc = json.loads((tmp_path / "result.json").read_text())
    assert result.stats.errors == 0 and result.stats.queries == len(ROWS)
    cache = doc["tokens"]["cache"]
    prompt_total = sum(length for _, length in ROWS)
    assert cache["requests_reporting"] == len(ROWS)
    assert cache["prompt_tokens_reporting"] == prompt_total + len(ROWS)  # + the server's BOS
    assert cache["cached_tokens_total"] == _ideal_cached() > 0
    assert cache["hit_rate"]["requested"] == pytest.approx(_ideal_cached() / prompt_total)


def _experiment(tmp_path: Path, openai_url: str, **more: object) -> dict[str, object]:
    settings = COMMON | {"input_tokens": 160, "output_tokens": 4, "fixed_output": True,
                         "prefix_groups": 2, "target_qps": 8.0, "warmup_s": 1.0,
                         "min_duration_s": 2.0, "min_query_count": 12, **more}
    run_test(settings_from_mapping(settings), openai_url, out_dir=tmp_path)
    doc: dict[str, object] = json.loads((tmp_path / "result.json").read_text())
    return doc


def test_a_prefix_cache_experiment_on_target_is_valid(tmp_path: Path, openai_url: str) -> None:
    doc = _experiment(tmp_path, openai_url, prefix_cache_hit_rate=0.6)
    rate = doc["tokens"]["cache"]["hit_rate"]  # type: ignore[index]
    assert rate["requested"] == 0.6 and abs(rate["achieved"] - 0.6) <= 0.05
    assert "cache_hit_rate" not in doc["reason_codes"]  # type: ignore[operator]


def test_a_prefix_cache_experiment_off_target_is_invalid(tmp_path: Path, openai_url: str) -> None:
    # 32 shared tokens before 160 of its own: about 0.17 of the prompt, far from 0.6
    doc = _experiment(tmp_path, openai_url, prefix_cache_hit_rate=0.6, prefix_tokens=32)
    rate = doc["tokens"]["cache"]["hit_rate"]  # type: ignore[index]
    assert rate["achieved"] < 0.25
    assert doc["valid"] is False and "cache_hit_rate" in doc["reason_codes"]  # type: ignore[operator]
