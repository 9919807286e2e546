"""A short token-mode Server run against `llmsim`, for the tests that need one: the settings
every such run shares, and the simulated server's spec."""

from __future__ import annotations

__all__ = ["llmsim_spec", "token_server"]


def token_server(**changes: object) -> dict[str, object]:
    """Settings of a dev token-mode Server run judged at p90 (8 output tokens each, exactly),
    with `changes` on top."""
    return {"scenario": "Server", "preset": "dev", "use_token_latencies": True,
            "output_tokens": 8, "fixed_output": True, "target_latency_percentile": 90.0,
            "max_issue_lag_ms": 50.0, **changes}


def llmsim_spec(step_per_seq: str) -> str:
    """An `llmsim` server of 8 sequences at most: 2 ms a step plus `step_per_seq` a sequence."""
    return f"llmsim:step_base=2ms,step_per_seq={step_per_seq},prefill_per_token=10us,max_seqs=8"
