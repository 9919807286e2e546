"""A real Prometheus scrapes a loadgen run (and a `loadgen serve` SUT) and agrees with result.json.

Prometheus (Debian package `prometheus`) runs on loopback with a temporary config (1 s
scrapes) and storage; every process started here is stopped by its pid. Other test runs
may share the machine: Prometheus answers only under a random path prefix, the SUT binds
port 0 and says which port it got, and run ids are random, so no run reads another's data.
Tolerances:
`histogram_quantile` interpolates inside one of the exporter's buckets (`BUCKETS_S`,
adjacent bounds at most 1.28x apart), so its p50/p99 are within that ratio of the HDR
figures in result.json; counters are compared exactly once the final values are scraped;
a 10 s `rate` of completed queries is within 15% of the run's `qps_completed` (a sample is
stamped when its scrape starts but read up to `SNAPSHOT_TIMEOUT_S` later on a loaded machine).
"""

import contextlib
import itertools
import json
import math
import queue
import re
import secrets
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from loadgen.adapters.registry import make_sut
from loadgen.adapters.sim import ServiceTime, SimSut
from loadgen.api import run_test
from loadgen.live.prometheus import BUCKETS_S, PrometheusExporter
from loadgen.plan.settings import load_settings
from tests.served import stop

PROMETHEUS = shutil.which("prometheus")
BUCKET_RATIO = max(b / a for a, b in itertools.pairwise(BUCKETS_S))
SCRAPE_S = 1

pytestmark = [
    pytest.mark.functional,
    pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not installed: "
                       "apt-get install prometheus (.ci/run does)"),
]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.status, response.read()


class _Prometheus:
    """The HTTP API of one Prometheus server."""

    def __init__(self, url, proc):
        self.url, self.proc = url, proc

    def query(self, expr, at=None):
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        _, body = _get(f"{self.url}/api/v1/query?{urllib.parse.urlencode(params)}")
        doc = json.loads(body)
        assert doc["status"] == "success", doc
        return doc["data"]["result"]

    def value(self, expr, at=None):
        """The single sample of an instant query, as a float (None when empty)."""
        result = self.query(expr, at)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None

    def wait_for(self, expr, expected, timeout_s=15.0):
        """Poll until `expr` equals `expected` (the final values got scraped)."""
        deadline = time.monotonic() + timeout_s
        while (value := self.value(expr)) != expected:
            assert time.monotonic() < deadline, f"{expr} = {value}, expected {expected}"
            assert self.proc.poll() is None, "prometheus exited"
            time.sleep(0.25)


@contextlib.contextmanager
def _prometheus(tmp_path, targets):
    """A Prometheus on loopback scraping `targets` ({job: 'host:port'}) every second."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}/{secrets.token_hex(6)}"  # a port taken meanwhile 404s
    config = tmp_path / "prometheus.yml"  # JSON is YAML
    config.write_text(json.dumps({
        "global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s"},
        "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]}
                           for job, target in targets.items()],
    }))
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}",
                             f"--web.external-url={url}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        prom = _Prometheus(url, proc)
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (tmp_path / "prometheus.log").read_text()
            with contextlib.suppress(OSError):
                if _get(f"{prom.url}/-/ready", timeout=1)[0] == 200:
                    break
            assert time.monotonic() < deadline, "prometheus not ready in 30 s"
            time.sleep(0.2)
        for job in targets:  # every target scraped once before the run starts
            prom.wait_for(f'up{{job="{job}"}}', 1.0, timeout_s=20)
        yield prom
    finally:
        stop(proc, 15)
        log.close()


def _settings(*overrides):
    return load_settings(None, ["preset='dev'", "min_query_count=100", *overrides])


def _assert_same_bucket_resolution(estimate_s, hdr_ns):
    ratio = estimate_s / (hdr_ns / 1e9)
    assert 1 / BUCKET_RATIO <= ratio <= BUCKET_RATIO, (estimate_s, hdr_ns)


def test_prometheus_agrees_with_the_result_of_a_sim_run(tmp_path):
    run_id = f"functional-sim-{secrets.token_hex(4)}"
    exporter = PrometheusExporter(listen="127.0.0.1:0", run_id=run_id)
    sel = f'{{run_id="{run_id}"}}'
    with exporter, _prometheus(tmp_path, {"loadgen": f"127.0.0.1:{exporter.port}"}) as prom:
        started = time.time()
        run_test(_settings("target_qps=500", "target_latency_ms=10", "min_duration_s=12"),
                 SimSut(ServiceTime.parse("exp:500us"), seed=1), tmp_path / "run",
                 monitors=[exporter])
        result = json.loads((tmp_path / "run" / "result.json").read_text())
        prom.wait_for(f"loadgen_queries_measured_total{sel}", float(result["queries"]))
        prom.wait_for(f"loadgen_latency_seconds_count{sel}", float(result["latency_ns"]["count"]))
        prom.wait_for(f"loadgen_queries_good_total{sel}",
                      float(result["queries"] - result["overlatency"]))
        for q, key in ((0.5, "p50"), (0.99, "p99")):
            estimate = prom.value(f"histogram_quantile({q}, loadgen_latency_seconds_bucket{sel})")
            _assert_same_bucket_resolution(estimate, result["latency_ns"][key])
        late = started + 11.5  # seconds 1.5 to 11.5 of the 12 s of issuing
        rate = prom.value(f"rate(loadgen_queries_completed_total{sel}[10s])", at=late)
        assert rate == pytest.approx(result["qps_completed"], rel=0.15), rate
        assert prom.value(f"loadgen_target_queries_per_second{sel}") == 500.0
        assert prom.value(f"loadgen_queries_in_flight{sel}") == 0.0
        assert prom.value(f"loadgen_queries_in_flight{sel}", at=late) is not None  # live
        lag = prom.value(f"histogram_quantile(0.99, loadgen_issue_lag_seconds_bucket{sel})")
        assert lag is not None and not math.isnan(lag)


@contextlib.contextmanager
def _serve(model):
    """`loadgen serve` on loopback ports of its choosing; yields its HTTP port once ready.

    Stopped by pid (SIGTERM drains).
    """
    proc = subprocess.Popen([sys.executable, "-m", "loadgen", "serve", "--model", model,
                             "--http-port", "0", "--grpc-port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, cwd=Path(__file__).parents[1])
    lines: queue.Queue[str] = queue.Queue()

    def read():
        for line in proc.stdout:
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        deadline, port, seen = time.monotonic() + 120, None, []
        while not (seen and seen[-1].startswith("ready ")):
            try:
                seen.append(lines.get(timeout=0.5))
            except queue.Empty:
                assert proc.poll() is None, f"loadgen serve exited: {seen}"
                assert time.monotonic() < deadline, f"loadgen serve not ready in 120 s: {seen}"
                continue
            if match := re.match(r"serving \S+ http=[^ ]*:(\d+) ", seen[-1]):
                port = int(match.group(1))
        assert port is not None, seen
        yield port
    finally:
        stop(proc, 30)
        reader.join(timeout=5)
        proc.stdout.close()


def test_prometheus_scrapes_the_sut_server_and_loadgen_together(tmp_path):
    run_id = f"functional-http-{secrets.token_hex(4)}"
    exporter = PrometheusExporter(listen="127.0.0.1:0", run_id=run_id)
    sel = f'{{run_id="{run_id}"}}'
    with _serve("mlp") as http_port, exporter, _prometheus(
            tmp_path, {"loadgen": f"127.0.0.1:{exporter.port}", "sut": f"127.0.0.1:{http_port}"},
    ) as prom:
        sut = make_sut(f"http://127.0.0.1:{http_port}/mlp")
        result = run_test(_settings("target_qps=300", "target_latency_ms=100",
                                    "min_duration_s=8"), sut, monitors=[exporter])
        stats = result.stats
        assert stats.errors == 0, stats.errors_by_kind
        prom.wait_for(f"loadgen_queries_measured_total{sel}", float(stats.queries))
        # one request per single-sample query, each answered and timed once by the SUT
        prom.wait_for('sum(sut_requests_total{outcome="ok"})', float(stats.queries))
        prom.wait_for("sum(sut_compute_seconds_count)", float(stats.queries))
        prom.wait_for("sum(sut_queue_seconds_count)", float(stats.queries))
        assert prom.value("sum(sut_queue_depth)") == 0.0
        batches = prom.value("sum(sut_batch_size_count)")
        assert 0 < batches <= stats.queries
        estimate = prom.value(f"histogram_quantile(0.99, loadgen_latency_seconds_bucket{sel})")
        _assert_same_bucket_resolution(estimate, stats.latency_ns.p99)
