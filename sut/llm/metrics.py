"""Prometheus metrics of the LLM engine, under vLLM's (v1) names where the meaning matches.

Registered into the registry the caller gives; label `model_name` as vLLM has it. As in
current vLLM, `time_per_output_token_seconds` observes every token gap (the older name of
`inter_token_latency_seconds`) and `request_time_per_output_token_seconds` each request's
mean; the prefix-cache counters are in tokens, a query being a request's prompt at its
first admission (a preempted request's re-admission is not counted again).

    vllm:num_requests_running          sequences holding a seat and KV blocks (gauge)
    vllm:num_requests_waiting          requests queued, preempted ones included (gauge)
    vllm:kv_cache_usage_perc           fraction of KV blocks held, 0..1 (gauge)
    vllm:time_to_first_token_seconds   arrival -> first token (histogram)
    vllm:inter_token_latency_seconds   every gap between output tokens (histogram)
    vllm:time_per_output_token_seconds           every gap between output tokens (as ITL)
    vllm:request_time_per_output_token_seconds   per request, (last - first token) / (N - 1)
    vllm:e2e_request_latency_seconds   arrival -> finish
    vllm:request_queue_time_seconds    arrival -> first scheduled
    vllm:request_prefill_time_seconds  first scheduled -> first token
    vllm:request_decode_time_seconds   first token -> finish
    vllm:prompt_tokens_total, vllm:generation_tokens_total   (counters)
    vllm:request_success_total{finished_reason}              stop, length, abort, error
    vllm:num_preemptions_total         preemptions by recompute
    vllm:prefix_cache_queries_total, vllm:prefix_cache_hits_total   in tokens
    vllm:iteration_tokens_total        tokens computed per step (histogram)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence as Seq
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from sut.llm.engine import LLMEngine
from sut.llm.sequence import RequestTimings

__all__ = ["EngineMetrics"]

_LATENCY = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
            2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)


class EngineMetrics:
    """The engine's observer: gauges read at scrape time, the rest observed as it happens."""

    def __init__(self, registry: CollectorRegistry, engine: LLMEngine) -> None:
        self.engine = engine
        name = engine.model_name
        labels = ("model_name",)

        def gauge(metric: str, doc: str, read: Any) -> None:
            Gauge(metric, doc, labels, registry=registry).labels(name).set_function(read)

        gauge("vllm:num_requests_running", "Requests running on the engine.",
              lambda: engine.num_running)
        gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.",
              lambda: engine.num_waiting)
        gauge("vllm:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = full).",
              lambda: engine.blocks.usage)

        def histogram(metric: str, doc: str, buckets: Seq[float] = _LATENCY) -> Any:
            return Histogram(metric, doc, labels, buckets=buckets, registry=registry).labels(name)

        def counter(metric: str, doc: str) -> Any:
            return Counter(metric, doc, labels, registry=registry).labels(name)

        self.ttft = histogram("vllm:time_to_first_token_seconds", "Time to first token.")
        self.itl = histogram("vllm:inter_token_latency_seconds", "Inter-token latency.")
        self.tpot_token = histogram("vllm:time_per_output_token_seconds",
                                    "Time per output token (every gap; as ITL).")
        self.tpot = histogram("vllm:request_time_per_output_token_seconds",
                              "Mean time per output token of a request.")
        self.e2e = histogram("vllm:e2e_request_latency_seconds", "End-to-end latency.")
        self.queue = histogram("vllm:request_queue_time_seconds", "Time in the waiting queue.")
        self.prefill = histogram("vllm:request_prefill_time_seconds", "Prefill time.")
        self.decode = histogram("vllm:request_decode_time_seconds", "Decode time.")
        self.step_tokens = histogram("vllm:iteration_tokens_total",
                                     "Tokens computed per engine step.", _TOKENS)
        self.prompt_tokens = counter("vllm:prompt_tokens", "Prompt tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Generation tokens.")
        self.preemptions = counter("vllm:num_preemptions", "Preemptions by recompute.")
        self.prefix_queries = counter("vllm:prefix_cache_queries",
                                      "Prompt tokens looked up in the prefix cache.")
        self.prefix_hits = counter("vllm:prefix_cache_hits",
                                   "Prompt tokens found in the prefix cache.")
        self._success = Counter("vllm:request_success", "Finished requests by reason.",
                                ("model_name", "finished_reason"), registry=registry)
        self._seen = (0, 0)
        engine.observer = self

    def step(self, record: dict[str, Any]) -> None:
        """One step ran."""
        self.step_tokens.observe(record["batched_tokens"])
        if record["preempted"]:
            self.preemptions.inc(record["preempted"])
        blocks = self.engine.blocks
        queries, hits = blocks.queries, blocks.hits
        if (queries, hits) != self._seen:
            self.prefix_queries.inc(queries - self._seen[0])
            self.prefix_hits.inc(hits - self._seen[1])
            self._seen = (queries, hits)

    def finished(self, timings: RequestTimings, token_ns: Seq[int], reason: str) -> None:
        """A request ended for `reason`."""
        self.prompt_tokens.inc(timings.prompt_tokens)
        self.generation_tokens.inc(timings.output_tokens)
        if token_ns:
            self.ttft.observe((token_ns[0] - timings.arrival_ns) / 1e9)
            for before, after in itertools.pairwise(token_ns):
                self.itl.observe((after - before) / 1e9)
                self.tpot_token.observe((after - before) / 1e9)
            if len(token_ns) > 1:
                self.tpot.observe((token_ns[-1] - token_ns[0]) / (len(token_ns) - 1) / 1e9)
            self.queue.observe(timings.queue_ns / 1e9)
            self.prefill.observe(timings.prefill_ns / 1e9)
            self.decode.observe(timings.decode_ns / 1e9)
        self.e2e.observe((timings.finished_ns - timings.arrival_ns) / 1e9)
        self._success.labels(self.engine.model_name, reason).inc()
