"""The Prometheus exporter: families, labels, buckets and counts against the collector."""

import asyncio
import http.server
import threading
import time
import urllib.request
from types import SimpleNamespace
from typing import ClassVar

import numpy as np
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.adapters.null import NullSut
from loadgen.adapters.sim import ServiceTime, SimSut
from loadgen.api import run_async, run_loop
from loadgen.live.prometheus import (
    BUCKETS_S,
    MAX_COMPONENTS,
    PrometheusExporter,
    monitors_for,
    parse_listen,
)
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import load_settings
from loadgen.record.collect import Collector

MS = 1_000_000
LABELS = {"scenario", "sut", "run_id"}


def _families(registry):
    text = generate_latest(registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _histogram(family, **labels):
    """(sorted [(le, cumulative)], count, sum) of the one series matching `labels`."""
    samples = [s for s in family.samples if all(s.labels.get(k) == v for k, v in labels.items())]
    buckets = sorted((float(s.labels["le"]), s.value) for s in samples
                     if s.name.endswith("_bucket"))
    count = next(s.value for s in samples if s.name.endswith("_count"))
    total = next(s.value for s in samples if s.name.endswith("_sum"))
    return buckets, count, total


def _value(families, name, **labels):
    family = families[name.removesuffix("_total")]
    return next(s.value for s in family.samples if s.name == name
                and all(s.labels.get(k) == v for k, v in labels.items()))


def _settings(*overrides):
    return load_settings(None, ["preset='dev'", "target_latency_ms=5", *overrides])


def _plan(*overrides):
    return RunPlan.of(_settings(*overrides))


def _hand_fed():
    """A collector fed by hand, and the latencies (ns) it holds."""
    rng = np.random.default_rng(7)
    latencies = rng.lognormal(np.log(2 * MS), 0.8, 500).astype(np.int64)
    c = Collector(slo_ns=5 * MS)
    for q, lat in enumerate(latencies.tolist()):
        c.issued_query(q, 1_000 * q, 1_000 * q + 500, 1, measured=True)
        c.done(q, 1_000 * q + lat, components={"queue": lat // 4, "compute": lat // 2,
                                               "batch_size": 4})
    for q in range(500, 520):
        c.issued_query(q, 0, 0, 1, measured=True)
        c.failed(q, 10, "timeout" if q % 2 else "http_503")
    for q in range(520, 523):
        c.issued_query(q, 0, 0, 1, measured=True)  # left in flight
    return c, latencies


@pytest.fixture
def fed():
    c, latencies = _hand_fed()
    exporter = PrometheusExporter(run_id="r1")
    exporter.start(_plan(), SimpleNamespace(name="fake"), c)
    return exporter, c, latencies


def test_counters_and_gauges_equal_the_collector(fed):
    exporter, c, _ = fed
    f = _families(exporter.registry)
    assert _value(f, "loadgen_queries_issued_total") == c.issued == 523
    assert _value(f, "loadgen_queries_completed_total") == 500
    assert _value(f, "loadgen_queries_measured_total") == c.measured_queries
    assert _value(f, "loadgen_queries_good_total") == c.measured_queries - c.overlatency
    assert _value(f, "loadgen_queries_failed_total", kind="timeout") == 10
    assert _value(f, "loadgen_queries_failed_total", kind="http_503") == 10
    assert _value(f, "loadgen_queries_in_flight") == c.in_flight == 3
    assert _value(f, "loadgen_target_queries_per_second") == 100.0
    assert _value(f, "loadgen_latency_slo_seconds") == pytest.approx(0.005)


def test_every_series_carries_the_run_labels(fed):
    exporter, _, _ = fed
    f = _families(exporter.registry)
    assert all(name.startswith("loadgen_") for name in f)
    for family in f.values():
        for s in family.samples:
            assert LABELS <= set(s.labels), s
            assert (s.labels["scenario"], s.labels["sut"], s.labels["run_id"]) == (
                "Server", "fake", "r1")


def test_histogram_buckets_are_cumulative_and_exact_at_the_bounds(fed):
    exporter, c, latencies = fed
    f = _families(exporter.registry)
    buckets, count, total = _histogram(f["loadgen_latency_seconds"])
    assert [le for le, _ in buckets] == [*BUCKETS_S, float("inf")]
    counts = [n for _, n in buckets]
    assert counts == sorted(counts)
    assert count == counts[-1] == c.latency.count == latencies.size
    for le, n in buckets[:-1]:  # HDR keeps 3 digits: only values within 0.1% of a bound blur
        bound_ns = le * 1e9
        assert (latencies <= bound_ns * 0.999).sum() <= n <= (latencies <= bound_ns * 1.001).sum()
    assert total == pytest.approx(latencies.sum() / 1e9, rel=1e-3)
    _, lag_count, lag_sum = _histogram(f["loadgen_issue_lag_seconds"])
    assert lag_count == c.issue_lag.count == 523
    assert lag_sum == pytest.approx(500 * 500e-9, rel=1e-3)


def test_components_are_labelled_and_batch_size_is_not_a_duration(fed):
    exporter, _, latencies = fed
    f = _families(exporter.registry)
    family = f["loadgen_component_seconds"]
    assert {s.labels["component"] for s in family.samples} == {"queue", "compute"}
    _, count, total = _histogram(family, component="compute")
    assert count == latencies.size
    assert total == pytest.approx((latencies // 2).sum() / 1e9, rel=1e-3)


def test_component_names_are_capped():
    c = Collector(slo_ns=MS)
    c.issued_query(0, 0, 0, 1, measured=True)
    c.done(0, MS, components={f"c{i:03d}": 1_000 for i in range(MAX_COMPONENTS + 10)})
    exporter = PrometheusExporter()
    exporter.start(_plan(), SimpleNamespace(name="fake"), c)
    family = _families(exporter.registry)["loadgen_component_seconds"]
    assert len({s.labels["component"] for s in family.samples}) == MAX_COMPONENTS


def test_nothing_is_exported_before_a_run_or_into_the_global_registry():
    registry = CollectorRegistry()
    exporter = PrometheusExporter(registry)
    assert generate_latest(registry) == b""
    assert exporter.registry is registry
    assert REGISTRY.get_sample_value("loadgen_queries_issued_total") is None
    exporter.close()


def test_a_run_exports_what_its_result_reports():
    exporter = PrometheusExporter()
    settings = _settings("min_duration_s=0.3", "target_qps=2000", "target_latency_ms=20")
    sut = SimSut(ServiceTime.parse("exp:200us"), seed=3)
    result = run_loop(run_async(settings, sut, monitors=[exporter]))
    f = _families(exporter.registry)
    stats = result.stats
    assert _value(f, "loadgen_queries_measured_total") == stats.queries
    assert _value(f, "loadgen_queries_good_total") == stats.queries - stats.overlatency
    assert _value(f, "loadgen_achieved_queries_per_second") == stats.qps_completed
    assert _value(f, "loadgen_queries_in_flight") == 0
    buckets, count, total = _histogram(f["loadgen_latency_seconds"], sut="sim")
    assert count == stats.latency_ns.count
    # result.json rounds the mean to whole ns
    assert total / count == pytest.approx(stats.latency_ns.mean / 1e9, abs=0.5e-9)
    # the p99 lies in the bucket where the cumulative count crosses 99%
    bucket = next(le for le, n in buckets if n >= 0.99 * count)
    previous = max([0.0, *(le for le in BUCKETS_S if le < bucket)])
    assert previous * 0.999 <= stats.latency_ns.p99 / 1e9 <= bucket * 1.001


def _measured_any(exporter: PrometheusExporter) -> bool:
    """Whether the exporter has counted a measured query yet (its run may not have started)."""
    family = _families(exporter.registry).get("loadgen_queries_measured")
    return family is not None and any(
        s.name == "loadgen_queries_measured_total" and s.value > 0 for s in family.samples)


def test_a_scrape_from_another_thread_mid_run_is_consistent():
    exporter = PrometheusExporter()
    settings = _settings("min_duration_s=0.6", "target_qps=3000", "target_latency_ms=20")
    scrapes = []

    async def scrape_while_running():
        give_up = time.monotonic() + 30
        while not _measured_any(exporter):
            assert time.monotonic() < give_up, "no query measured in 30 s"
            await asyncio.sleep(0.01)  # polls for the run's first measured query, bounded
        for _ in range(3):
            scrapes.append(await asyncio.to_thread(_families, exporter.registry))

    async def main():
        task = asyncio.create_task(scrape_while_running())
        result = await run_async(settings, SimSut(ServiceTime.parse("const:100us")),
                                 monitors=[exporter])
        await task
        return result

    result = run_loop(main())
    assert len(scrapes) == 3
    for f in scrapes:  # taken between two loop callbacks: the counters agree exactly
        issued = _value(f, "loadgen_queries_issued_total")
        done = _value(f, "loadgen_queries_completed_total")
        assert issued == done + _value(f, "loadgen_queries_in_flight")
        _, count, _ = _histogram(f["loadgen_latency_seconds"])
        assert count == _value(f, "loadgen_queries_measured_total")
        assert 0 < issued <= result.stats.queries


def test_a_closed_loop_is_read_directly():
    c, _ = _hand_fed()
    exporter = PrometheusExporter()

    async def start():
        exporter.start(_plan(), SimpleNamespace(name="fake"), c)

    asyncio.run(start())  # the run's loop is gone and stop() never came (a failed run)
    assert _value(_families(exporter.registry), "loadgen_queries_issued_total") == 523


def test_closed_loop_scenarios_have_no_target_rate():
    exporter = PrometheusExporter()
    run_loop(run_async(_settings("scenario='SingleStream'", "min_duration_s=0.1",
                                 "min_query_count=10"), NullSut(), monitors=[exporter]))
    assert "loadgen_target_queries_per_second" not in _families(exporter.registry)


@pytest.mark.parametrize(("text", "expected"), [
    ("9464", ("127.0.0.1", 9464)),
    ("0.0.0.0:9464", ("0.0.0.0", 9464)),
    ("[::1]:0", ("::1", 0)),
])
def test_parse_listen(text, expected):
    assert parse_listen(text) == expected


@pytest.mark.parametrize("text", ["", "x", "host:", "1:99999", "-1"])
def test_parse_listen_refuses(text):
    with pytest.raises(Exception, match="PORT or HOST:PORT"):
        parse_listen(text)


def test_no_monitor_unless_asked():
    with monitors_for(None, None) as monitors:
        assert monitors == []


class _Gateway(http.server.BaseHTTPRequestHandler):
    received: ClassVar[list[tuple[str, bytes]]] = []

    def do_PUT(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.received.append((self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.functional
def test_serves_on_loopback_and_pushes_at_the_end():
    gateway = http.server.HTTPServer(("127.0.0.1", 0), _Gateway)
    thread = threading.Thread(target=gateway.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{gateway.server_address[1]}"
        with monitors_for("127.0.0.1:0", url) as monitors:
            (exporter,) = monitors
            assert exporter.port
            run_loop(run_async(_settings("min_duration_s=0.1"), NullSut(), monitors=monitors))
            with urllib.request.urlopen(f"http://127.0.0.1:{exporter.port}/metrics") as r:
                assert b"loadgen_queries_issued_total" in r.read()
        assert exporter.port is None
    finally:
        gateway.shutdown()
        gateway.server_close()
        thread.join()
    ((path, body),) = _Gateway.received
    assert path == f"/metrics/job/loadgen/run_id/{exporter.run_id}"
    assert b"loadgen_latency_seconds_bucket" in body
