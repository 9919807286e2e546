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


def test_the_progress_from_several_workers_carries_their_merged_glance():
    glances = []

    def take(progress):
        if progress.glance is not None:
            glances.append(progress.glance)

    r = run_test(load_settings(None, [*RUN, "min_duration_s=2.5"]), "sim:service=const:2ms",
                 progress=take)
    assert glances, "no progress carried a glance"
    last = glances[-1]
    assert last.p50_ns is not None and last.p99_ns is not None
    assert 2_000_000 <= last.p50_ns <= last.p99_ns <= r.stats.latency_ns.max
    assert last.within_slo is not None and last.issue_lag_p99_ns is not None
    assert last.errors_by_kind == ()


def test_a_token_run_over_workers_exports_its_token_figures_live():
    exporter = PrometheusExporter()
    seen: list[float] = []

    def scrape(progress):
        text = generate_latest(exporter.registry).decode()
        if "loadgen_ttft_seconds_count" in text:
            seen.append(_value(text, "loadgen_ttft_seconds_count"))

    settings = load_settings(None, [
        "preset='dev'", "scenario='Server'", "target_qps=60", "min_duration_s=2.5",
        "min_query_count=20", "use_token_latencies=true", "ttft_latency_ms=50",
        "tpot_latency_ms=10", "input_tokens=40", "output_tokens=4", "max_issue_lag_ms=1000",
        "workers=2"])
    run_test(settings, "llmsim:step_base=2ms", progress=scrape, monitors=[exporter])
    assert seen and max(seen) > 0


def test_a_multi_turn_run_over_workers_exports_its_turns_live():
    exporter = PrometheusExporter()
    seen: list[str] = []

    def scrape(progress):
        text = generate_latest(exporter.registry).decode()
        seen.extend(re.findall(r'^loadgen_turn_ttft_seconds_count\{[^}]*turn="(\d+)"', text,
                               re.MULTILINE))

    settings = load_settings(None, [
        "preset='dev'", "scenario='Server'", "target_qps=40", "min_duration_s=2.5",
        "min_query_count=20", "use_token_latencies=true", "ttft_latency_ms=50",
        "tpot_latency_ms=10", "input_tokens=40", "output_tokens=4", "max_issue_lag_ms=1000",
        "turns=2", "think_time_ms=5", "workers=2"])
    r = run_test(settings, "llmsim:step_base=2ms", progress=scrape, monitors=[exporter])
    assert {"1", "2"} <= set(seen)  # both turns, from the workers' reports, mid-run
    assert r.stats.token_stats is not None and sorted(r.stats.token_stats.turns) == ["1", "2"]
