"""Prometheus gauges of the server's own metrics, re-exported on loadgen's /metrics.

Live, from the scraper's latest scrape (labels scenario, sut, run_id; a gauge the server does
not expose is left out): loadgen_server_kv_cache_usage_ratio, loadgen_server_requests_running,
loadgen_server_requests_waiting. Once the run has ended, from result.json's
`server_metrics.deltas` over the measured window (unknown figures left out, never zero):
loadgen_server_prefix_cache_hit_rate, loadgen_server_preemptions,
loadgen_server_kv_cache_usage_max_ratio, loadgen_server_spec_decode_acceptance_rate.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from loadgen.judge.servermetrics import ServerMetrics, gauges_now
from loadgen.record.scrape import ServerScraper

__all__ = ["server_gauges", "server_run_gauges"]

_LIVE = (("loadgen_server_kv_cache_usage_ratio", "kv_cache_usage",
          "The server's KV cache usage (0..1), its latest scrape."),
         ("loadgen_server_requests_running", "requests_running",
          "Requests the server runs, its latest scrape."),
         ("loadgen_server_requests_waiting", "requests_waiting",
          "Requests waiting on the server, its latest scrape."))
_RUN = (("loadgen_server_prefix_cache_hit_rate", "prefix_cache_hit_rate",
         "Prefix-cache hits / queries (tokens) over the measured window."),
        ("loadgen_server_preemptions", "preemptions",
         "The server's preemptions over the measured window."),
        ("loadgen_server_kv_cache_usage_max_ratio", "kv_cache_usage_max",
         "The highest KV cache usage scraped in the measured window."),
        ("loadgen_server_spec_decode_acceptance_rate", "spec_decode_acceptance_rate",
         "Accepted / draft tokens of speculative decoding over the measured window."))


def _families(table: tuple[tuple[str, str, str], ...], label_names: Sequence[str],
              labels: Sequence[str], values: dict[str, float | None]) -> Iterator[Metric]:
    for name, key, doc in table:
        value = values.get(key)
        if value is not None:
            family = GaugeMetricFamily(name, doc, labels=label_names)
            family.add_metric(list(labels), float(value))
            yield family


def server_gauges(label_names: Sequence[str], labels: Sequence[str],
                  scraper: ServerScraper) -> Iterator[Metric]:
    """The latest scrape's mapped gauges (none before the first good scrape)."""
    latest = scraper.latest()
    if latest is not None:
        now: dict[str, float | None] = dict(gauges_now(latest, scraper.types))
        yield from _families(_LIVE, label_names, labels, now)


def server_run_gauges(label_names: Sequence[str], labels: Sequence[str],
                      figures: ServerMetrics) -> Iterator[Metric]:
    """The run's server figures over the measured window."""
    yield from _families(_RUN, label_names, labels, figures.deltas)
