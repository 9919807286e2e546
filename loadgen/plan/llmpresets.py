"""MLPerf's LLM targets, as `mlperf_model` presets (token-mode latency bounds per benchmark).

From mlcommons/inference `loadgen/mlperf.conf` (b66003e): every LLM benchmark
sets `use_token_latencies = 1`, `target_latency = 0` and, for Server, p99 TTFT
and TPOT bounds in ms; the `-interactive` variants tighten them. The sample
counts are the conf's `performance_sample_count_override`.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LLM_PRESETS", "llm_preset"]

_TARGETS = {  # name: (ttft ms, tpot ms, performance sample count)
    "llama2-70b": (2000.0, 200.0, 24576),
    "llama2-70b-interactive": (450.0, 40.0, 24576),
    "mixtral-8x7b": (2000.0, 200.0, 15000),
    "llama3_1-405b": (6000.0, 175.0, 8313),
    "llama3_1-405b-interactive": (4500.0, 80.0, 8313),
    "llama3_1-8b": (2000.0, 100.0, 13368),
    "llama3_1-8b-interactive": (500.0, 30.0, 13368),
    "deepseek-r1": (2000.0, 80.0, 4388),
    "deepseek-r1-interactive": (1500.0, 15.0, 4388),
    "gpt-oss-120b": (3000.0, 80.0, 6396),
    "gpt-oss-120b-interactive": (2000.0, 15.0, 6396),
}

LLM_PRESETS: tuple[str, ...] = tuple(_TARGETS)
"""The `mlperf_model` names."""


def llm_preset(name: str) -> dict[str, Any]:
    """The settings one `mlperf_model` implies (a KeyError for an unknown name)."""
    ttft, tpot, samples = _TARGETS[name]
    return {"use_token_latencies": True, "target_latency_ms": 0.0, "ttft_latency_ms": ttft,
            "tpot_latency_ms": tpot, "performance_sample_count": samples,
            "total_sample_count": samples}
