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
