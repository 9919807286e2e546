"""Prefix-cache experiments: a target hit rate, the prefix that gives it, the rate asked.

With `prefix_cache_hit_rate` r over a synthetic workload (`input_tokens` the whole
prompt) and no `prefix_tokens`, each prompt starts with one of `prefix_groups`
shared prefixes of round(r * mean input) tokens, so once each group's prefix is
cached (`warmup_s` is the prime phase: measured requests then find it) r of the
prompt tokens are cache hits. A Mooncake replay asks the hit rate its `hash_ids`
give (`traces.blocks.ideal_cached_tokens`). `judge.verdict` compares the asked
rate with the server's `cached_tokens` when `prefix_cache_hit_rate` is set.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check_prefix_cache", "prefix_for_target", "requested_hit_rate"]


def check_prefix_cache(s: Any, problems: list[str]) -> None:
    """The keys of a prefix-cache experiment."""
    if not 0 <= s.prefix_cache_hit_rate < 1:
        problems.append(f"prefix_cache_hit_rate: must be in [0, 1), got "
                        f"{s.prefix_cache_hit_rate!r}")
    if not 0 < s.prefix_cache_tolerance <= 1:
        problems.append(f"prefix_cache_tolerance: must be in (0, 1], got "
                        f"{s.prefix_cache_tolerance!r}")
    mooncake = s.arrival == "trace" and s.trace_format == "mooncake"
    if s.prefix_cache_hit_rate and s.input_tokens is None and not mooncake:
        problems.append("prefix_cache_hit_rate: needs a synthetic workload (input_tokens) or "
                        "a Mooncake trace (trace_format = \"mooncake\")")


def prefix_for_target(s: Any) -> int:
    """Shared-prefix tokens of the run: `prefix_tokens`, else the target's share of the
    mean prompt (0 without a target; the prompts' own parts are then shorter by it)."""
    if s.prefix_tokens or not s.prefix_cache_hit_rate or s.input_tokens is None:
        return int(s.prefix_tokens)
    dist = s.input_tokens
    mean: float = (dist.min + dist.max) / 2 if dist.kind == "uniform" else dist.mean
    rate: float = s.prefix_cache_hit_rate
    return round(rate * mean)


def requested_hit_rate(s: Any, prompts: object) -> float | None:
    """The hit rate the workload asks: the target, else a Mooncake trace's own, else None."""
    if s.prefix_cache_hit_rate:
        return float(s.prefix_cache_hit_rate)
    ideal = getattr(prompts, "ideal_hit_rate", None)
    return None if ideal is None else float(ideal)
