"""The server's view of a run against `loadgen serve --model tiny-llm`: with a shared-prefix
workload, the prefix-cache hit rate scraped from its /metrics agrees with the per-request
`cached_tokens` of its usage, and KV usage and running requests come as series."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.api import run_test
from loadgen.plan.settings import settings_from_mapping
from sut.llm.config import EngineConfig
from sut.llm.server import LlmServerThread
from sut.server.core import ServerConfig

pytestmark = pytest.mark.functional

SERVER = {"scenario": "Server", "preset": "dev", "min_duration_s": 2.0, "target_qps": 8.0,
          "min_query_count": 12, "use_token_latencies": True, "ttft_latency_ms": 5000.0,
          "tpot_latency_ms": 1000.0, "tokenizer": "bytes", "input_tokens": 96,
          "prefix_tokens": 64, "prefix_groups": 2, "output_tokens": 16, "fixed_output": True,
          "target_latency_percentile": 90.0, "max_issue_lag_ms": 200.0,
          "server_metrics": "auto", "server_metrics_interval_s": 0.2, "endpoint_probe": True}


def test_scraped_hit_rate_agrees_with_the_usage_cached_tokens(tmp_path: Path) -> None:
    with LlmServerThread("tiny-llm", EngineConfig(device="cpu", max_num_seqs=4),
                         ServerConfig(http_port=0)) as server:
        spec = f"openai://127.0.0.1:{server.server.http_port}/tiny-llm?endpoint=completions"
        result = run_test(settings_from_mapping(SERVER), spec, out_dir=tmp_path)
    doc = json.loads((tmp_path / "result.json").read_text())
    assert result.stats.errors == 0
    cache = doc["tokens"]["cache"]
    assert cache["requests_reporting"] == doc["tokens"]["requests"] > 0
    achieved = cache["hit_rate"]["achieved"]
    m = doc["server_metrics"]
    assert m["source"].endswith("/metrics") and m["servers"] == ["vllm"]
    assert m["failed_scrapes"] == 0, m["errors"]
    scraped = m["deltas"]["prefix_cache_hit_rate"]
    assert achieved > 0.3 and scraped == pytest.approx(achieved, rel=0.01)
    usage, running = m["series"]["kv_cache_usage"], m["series"]["requests_running"]
    assert len(usage) == len(running) >= 3 and [t for t, _ in usage] == [t for t, _ in running]
    # point samples of gauges: whenever a scrape saw requests running, they held KV blocks
    assert all(u > 0 for (_, u), (_, n) in zip(usage, running, strict=True) if n > 0)
    assert 0 <= m["deltas"]["kv_cache_usage_max"] <= 1
    assert m["histograms"]["ttft"]["count"] > 0
    endpoint = doc["endpoint"]  # what it said of itself, and its baseline round trip
    assert endpoint["identity"]["models"] == ["tiny-llm"] and endpoint["gpu"] is None
    rtt = endpoint["baseline_rtt"]
    assert rtt["route"] == "/health" and rtt["status"] == 200 and rtt["count"] == 5
    assert 0 < rtt["min_ns"] <= rtt["median_ns"] <= rtt["max_ns"] < 2 * 10**9


def test_a_protected_metrics_route_is_read_with_the_suts_own_token(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SERVER_VIEW_TOKEN", "sesame")
    settings = SERVER | {"min_duration_s": 1.0, "min_query_count": 4}
    with LlmServerThread("tiny-llm", EngineConfig(device="cpu", max_num_seqs=4),
                         ServerConfig(http_port=0, auth_token="sesame")) as server:
        spec = (f"openai://127.0.0.1:{server.server.http_port}/tiny-llm?endpoint=completions"
                "&api_key_env=SERVER_VIEW_TOKEN")
        result = run_test(settings_from_mapping(settings), spec, out_dir=tmp_path)
    m = result.server_metrics
    assert m is not None and m.failed_scrapes == 0 and m.scrapes >= 2, m.errors
    assert result.endpoint is not None
    assert result.endpoint["identity"]["models"] == ["tiny-llm"]  # /v1/models needs the token
