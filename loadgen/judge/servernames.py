"""The servers' metric names, mapped to ours: vLLM (and `loadgen serve`, which uses vLLM's
names), SGLang, TGI, and process / DCGM memory gauges.

Each of our names lists its candidates in order; the first family a scrape exposes wins
(so vLLM's `inter_token_latency_seconds` is read before its older per-token
`time_per_output_token_seconds`). Families are named as prometheus-client's parser names
them (a counter without its `_total`). A `Candidate` may read a histogram's `_sum` as a
counter (TGI gives token counts only as histograms) and scales values to base units.

    ours                         vLLM / loadgen serve             SGLang                        TGI
    kv_cache_usage (0..1)        kv_cache_usage_perc (v0: gpu_)   token_usage                   -
    requests_running             num_requests_running             num_running_reqs              tgi_batch_current_size
    requests_waiting             num_requests_waiting             num_queue_reqs                tgi_queue_size
    preemptions                  num_preemptions                  num_retracted_requests        -
    prefix_cache_queries         prefix_cache_queries (tokens)    prompt_tokens                 -
    prefix_cache_hits            prefix_cache_hits (tokens)       cached_tokens                 -
    prompt_tokens                prompt_tokens                    prompt_tokens                 tgi_request_input_length (sum)
    generation_tokens            generation_tokens                generation_tokens             tgi_request_generated_tokens (sum)
    requests_succeeded           request_success                  num_requests                  tgi_request_success
    requests_failed              -                                -                             tgi_request_failure
    spec_decode_drafts           spec_decode_num_drafts           -                             -
    spec_decode_draft_tokens     spec_decode_num_draft_tokens     -                             -
    spec_decode_accepted_tokens  spec_decode_num_accepted_tokens  -                             -
    spec_accept_length (gauge)   -                                spec_accept_length            -
    ttft, itl, tpot, e2e, queue  time_to_first_token_seconds,     the same names under          tpot: tgi_request_mean_
      (histograms)               inter_token_latency_seconds,     sglang:, queue_time_seconds   time_per_token_duration,
                                 request_time_per_output_token_                                 e2e: tgi_request_duration,
                                 seconds, e2e_request_latency_                                  queue: tgi_request_queue_
                                 seconds, request_queue_time_s.                                 duration
    server_rss_bytes             process_resident_memory_bytes (any Python or Go exporter)
    gpu_memory_used_bytes        DCGM_FI_DEV_FB_USED (MiB, summed over GPUs)
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["COUNTERS", "GAUGES", "HISTOGRAMS", "Candidate", "flavour_of"]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One server's family for one of our names; `from_sum`: a histogram's `_sum` read as a
    counter; `scale`: to base units (bytes, seconds)."""

    family: str
    from_sum: bool = False
    scale: float = 1.0


def _c(*families: str) -> tuple[Candidate, ...]:
    return tuple(Candidate(f) for f in families)


GAUGES: dict[str, tuple[tuple[Candidate, ...], str]] = {  # ours: (candidates, across labels)
    "kv_cache_usage": (_c("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
                          "sglang:token_usage"), "max"),
    "requests_running": (_c("vllm:num_requests_running", "sglang:num_running_reqs",
                            "tgi_batch_current_size"), "sum"),
    "requests_waiting": (_c("vllm:num_requests_waiting", "sglang:num_queue_reqs",
                            "tgi_queue_size"), "sum"),
    "spec_accept_length": (_c("sglang:spec_accept_length"), "max"),
    "server_rss_bytes": (_c("process_resident_memory_bytes"), "sum"),
    "gpu_memory_used_bytes": ((Candidate("DCGM_FI_DEV_FB_USED", scale=2.0**20),), "sum"),
}

COUNTERS: dict[str, tuple[Candidate, ...]] = {
    "preemptions": _c("vllm:num_preemptions", "sglang:num_retracted_requests"),
    "prefix_cache_queries": _c("vllm:prefix_cache_queries", "sglang:prompt_tokens"),
    "prefix_cache_hits": _c("vllm:prefix_cache_hits", "sglang:cached_tokens"),
    "prompt_tokens": (*_c("vllm:prompt_tokens", "sglang:prompt_tokens"),
                      Candidate("tgi_request_input_length", from_sum=True)),
    "generation_tokens": (*_c("vllm:generation_tokens", "sglang:generation_tokens"),
                          Candidate("tgi_request_generated_tokens", from_sum=True)),
    "requests_succeeded": _c("vllm:request_success", "sglang:num_requests",
                             "tgi_request_success"),
    "requests_failed": _c("tgi_request_failure"),
    "spec_decode_drafts": _c("vllm:spec_decode_num_drafts"),
    "spec_decode_draft_tokens": _c("vllm:spec_decode_num_draft_tokens"),
    "spec_decode_accepted_tokens": _c("vllm:spec_decode_num_accepted_tokens"),
}

HISTOGRAMS: dict[str, tuple[Candidate, ...]] = {  # in seconds
    "ttft": _c("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds"),
    "itl": _c("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds",
              "sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
    "tpot": _c("vllm:request_time_per_output_token_seconds",
               "tgi_request_mean_time_per_token_duration"),
    "e2e": _c("vllm:e2e_request_latency_seconds", "sglang:e2e_request_latency_seconds",
              "tgi_request_duration"),
    "queue": _c("vllm:request_queue_time_seconds", "sglang:queue_time_seconds",
                "tgi_request_queue_duration"),
}


def flavour_of(family: str) -> str | None:
    """Which server family names look like: vllm, sglang, tgi, or None."""
    if family.startswith("vllm:"):
        return "vllm"
    if family.startswith("sglang:"):
        return "sglang"
    if family.startswith("tgi_"):
        return "tgi"
    return None
