"""`--sut builtin:tiny-llm` end to end through `loadgen.api.run_test`: a token run on the
real engine, continuous and static, with the engine's timings recorded as components."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.api import run_test
from loadgen.errors import LoadgenError
from loadgen.plan.settings import settings_from_mapping

SERVER = {"scenario": "Server", "preset": "dev", "min_duration_s": 1.0, "target_qps": 8.0,
          "min_query_count": 12, "use_token_latencies": True, "ttft_latency_ms": 5000.0,
          "tpot_latency_ms": 1000.0, "tokenizer": "bytes",
          "input_tokens": {"dist": "uniform", "min": 20, "max": 60}, "output_tokens": 6,
          "fixed_output": True, "target_latency_percentile": 90.0,
          "max_issue_lag_ms": 200.0}  # a shared, loaded test machine


@pytest.mark.parametrize("scheduler", ["continuous", "static"])
def test_a_token_run_on_the_engine(tmp_path: Path, scheduler: str) -> None:
    spec = f"builtin:tiny-llm,max_num_seqs=4,device=cpu,scheduler={scheduler}"
    result = run_test(settings_from_mapping(SERVER), spec, out_dir=tmp_path)
    doc = json.loads((tmp_path / "result.json").read_text())
    ts = result.stats.token_stats
    assert ts is not None and ts.tokens.requests == result.stats.queries > 0
    assert result.stats.errors == 0
    assert doc["tokens"]["output_total"] == 6 * doc["tokens"]["requests"]
    assert doc["itl_ns"]["count"] == 5 * doc["tokens"]["requests"]
    assert doc["ttft_ns"]["p50"] >= doc["ttft_ns"]["from_send"]["p50"] > 0
    assert {"queue", "prefill", "decode", "server_total"} <= set(doc["components_ns"])
    assert doc["sut"]["scheduler"] == scheduler


def test_a_run_without_a_token_workload_is_refused() -> None:
    plain = {k: v for k, v in SERVER.items() if k not in (
        "use_token_latencies", "ttft_latency_ms", "tpot_latency_ms", "tokenizer",
        "input_tokens", "output_tokens", "fixed_output")} | {"target_latency_ms": 1000.0}
    with pytest.raises(LoadgenError, match="token workload"):
        run_test(settings_from_mapping(plain), "builtin:tiny-llm,device=cpu")


def test_an_in_process_run_reports_its_memory(tmp_path: Path) -> None:
    run_test(settings_from_mapping(SERVER), "builtin:tiny-llm,max_num_seqs=4,device=cpu",
             out_dir=tmp_path)
    memory = json.loads((tmp_path / "result.json").read_text())["sut_memory"]
    assert memory["where"] == "in_process" and memory["host_rss_peak_bytes"] > 10 * 2**20
    assert memory["gpu_memory_peak_bytes"] is None  # CPU: CUDA never came up
    assert "Memory    : SUT peak host RSS" in (tmp_path / "summary.txt").read_text()
