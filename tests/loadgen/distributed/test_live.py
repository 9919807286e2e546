"""The driver serves one live /metrics for all workers: merged reports, as they arrive."""

import re

from prometheus_client import generate_latest

from loadgen.api import run_test
from loadgen.live.prometheus import PrometheusExporter
from loadgen.plan.settings import load_settings

RUN = ["preset='dev'", "target_latency_ms=50", "target_qps=400", "min_duration_s=3",
       "warmup_s=0.2", "max_issue_lag_ms=1000", "workers=2"]


def _value(text: str, name: str) -> float:
    found = re.search(rf"^{name}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE)
    assert found, name
    return float(found.group(1))


def test_one_exporter_reads_every_worker_live_and_the_merged_result_at_the_end():
    exporter = PrometheusExporter()
    seen: list[float] = []

    def scrape(progress):
        if progress.issued:
            seen.append(_value(generate_latest(exporter.registry).decode(),
                               "loadgen_queries_issued_total"))

    r = run_test(load_settings(None, RUN), "null", progress=scrape, monitors=[exporter])
    assert seen and max(seen) > 0  # figures during the run, from the workers' reports
    assert seen == sorted(seen)
    final = generate_latest(exporter.registry).decode()
    assert _value(final, "loadgen_queries_measured_total") == r.stats.queries
    assert _value(final, "loadgen_latency_seconds_count") == r.stats.latency_ns.count
    assert _value(final, "loadgen_queries_issued_total") == sum(
        w["issued"] for w in r.workers["per_worker"])
    assert 'sut="null"' in final


def test_a_token_run_over_workers_serves_its_token_series_live():
    exporter = PrometheusExporter()
    outputs: list[float] = []

    def scrape(progress):
        text = generate_latest(exporter.registry).decode()
        if "loadgen_output_tokens_total{" in text:
            outputs.append(_value(text, "loadgen_output_tokens_total"))

    tokens = [*RUN, "target_qps=100", "use_token_latencies=true", "ttft_latency_ms=500",
              "tpot_latency_ms=50", "input_tokens=16", "output_tokens=4", "fixed_output=true"]
    r = run_test(load_settings(None, tokens), "llmsim:step_base=1ms,max_seqs=32",
                 progress=scrape, monitors=[exporter])
    assert outputs and max(outputs) > 0  # merged from the workers' reports, mid-run
    final = generate_latest(exporter.registry).decode()
    assert r.stats.token_stats is not None
    assert _value(final, "loadgen_output_tokens_total") == r.stats.token_stats.tokens.output_total
    ttft = r.stats.token_stats.latency("ttft_ns").summary
    assert _value(final, "loadgen_ttft_seconds_count") == ttft["count"]
