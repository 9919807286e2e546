"""`server_metrics` through run_test: a scripted /metrics (SGLang- and TGI-style names) scraped
beside an llmsim run gives mapped deltas in result.json and the summary; a dead /metrics leaves
the verdict as it was, with a warning."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.api import run_test
from loadgen.judge.verdict import evaluate
from loadgen.live.prometheus import PrometheusExporter
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import settings_from_mapping
from loadgen.record.hostload import HostLoad
from loadgen.report.html import build_report
from loadgen.report.result import read_result
from tests.loadgen.llm.tokenrun import llmsim_spec, token_server

pytestmark = pytest.mark.functional

SERVER = token_server(min_duration_s=1.0, target_qps=40.0, min_query_count=20,
                      ttft_latency_ms=50.0, tpot_latency_ms=10.0, input_tokens=50)
SPEC = llmsim_spec("100us")


def _sglang(n: int) -> str:
    """The n-th scrape: 100 prompt tokens, 40 cached and one retraction per scrape."""
    return (f"# TYPE sglang:prompt_tokens_total counter\n"
            f'sglang:prompt_tokens_total{{model_name="m"}} {100 * n}\n'
            f"# TYPE sglang:cached_tokens_total counter\n"
            f'sglang:cached_tokens_total{{model_name="m",cache_source="device"}} {40 * n}\n'
            f"# TYPE sglang:num_retracted_requests_total counter\n"
            f'sglang:num_retracted_requests_total{{model_name="m"}} {n}\n'
            f"# TYPE sglang:token_usage gauge\n"
            f'sglang:token_usage{{model_name="m"}} {0.25 + 0.5 * (n % 2)}\n'
            f"# TYPE sglang:num_running_reqs gauge\n"
            f'sglang:num_running_reqs{{model_name="m"}} {n % 5}\n'
            f"# TYPE process_resident_memory_bytes gauge\n"
            f"process_resident_memory_bytes {2**30 + 4096 * n}\n")


def _tgi(n: int) -> str:
    return (f"# TYPE tgi_request_success counter\ntgi_request_success {3 * n}\n"
            f"# TYPE tgi_queue_size gauge\ntgi_queue_size {n % 3}\n"
            f"# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 4\n"
            f"# TYPE tgi_request_generated_tokens histogram\n"
            f'tgi_request_generated_tokens_bucket{{le="+Inf"}} {3 * n}\n'
            f"tgi_request_generated_tokens_sum {24 * n}\n"
            f"tgi_request_generated_tokens_count {3 * n}\n")


@pytest.fixture
def metrics_server(request: pytest.FixtureRequest) -> Iterator[str]:
    """A loopback /metrics whose counters grow with every scrape."""
    render = request.param
    scrapes = [0]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            scrapes[0] += 1
            body = render(scrapes[0]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _run(tmp_path: Path, url: str) -> dict[str, object]:
    settings = settings_from_mapping(SERVER | {"server_metrics": url,
                                               "server_metrics_interval_s": 0.1})
    run_test(settings, SPEC, out_dir=tmp_path)
    return json.loads((tmp_path / "result.json").read_text())


@pytest.mark.parametrize("metrics_server", [_sglang], indirect=True)
def test_sglang_style_names_give_the_mapped_deltas(tmp_path: Path, metrics_server: str) -> None:
    doc = _run(tmp_path, metrics_server)
    m = doc["server_metrics"]
    assert m["source"] == metrics_server and m["servers"] == ["sglang"]
    assert m["scrapes"] >= 5 and m["failed_scrapes"] == 0
    d = m["deltas"]
    assert d["prefix_cache_hit_rate"] == pytest.approx(0.4)
    assert d["preemptions"] == len(m["series"]["kv_cache_usage"]) - 1 > 0
    assert d["kv_cache_usage_max"] == 0.75
    times = [t for t, _ in m["series"]["requests_running"]]
    assert times == sorted(times) and m["window_s"] == [times[0], times[-1]]
    # on the run's own time axis: the scrape that opens the window is at or before its start
    assert -2 < times[0] < times[-1] < doc["duration_s"] + 3
    memory = doc["sut_memory"]  # the server's own gauge, its maximum over the window
    assert memory["where"] == "remote" and memory["host_rss_peak_bytes"] > 2**30
    summary = (tmp_path / "summary.txt").read_text()
    assert "Server    : " in summary and "prefix-cache hit rate 40.00%" in summary
    assert "Memory    : SUT peak host RSS 1024." in summary
    assert read_result(tmp_path).server_metrics is not None
    page = build_report(tmp_path).read_text()
    assert "Server: requests and KV cache over time" in page


@pytest.mark.parametrize("metrics_server", [_sglang], indirect=True)
def test_the_servers_figures_are_re_exported_on_our_metrics(metrics_server: str) -> None:
    exporter = PrometheusExporter(run_id="r1")
    settings = settings_from_mapping(SERVER | {"server_metrics": metrics_server,
                                               "server_metrics_interval_s": 0.1})
    run_test(settings, SPEC, monitors=[exporter])
    text = generate_latest(exporter.registry).decode()
    values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert values["loadgen_server_prefix_cache_hit_rate"] == pytest.approx(0.4)
    assert values["loadgen_server_kv_cache_usage_max_ratio"] == 0.75
    assert values["loadgen_server_preemptions"] > 0


@pytest.mark.parametrize("metrics_server", [_sglang], indirect=True)
def test_the_driver_scrapes_a_run_over_load_workers(tmp_path: Path, metrics_server: str) -> None:
    settings = settings_from_mapping(SERVER | {"workers": 2, "server_metrics": metrics_server,
                                               "server_metrics_interval_s": 0.1})
    result = run_test(settings, SPEC, out_dir=tmp_path)
    m = result.server_metrics
    assert m is not None and m.scrapes >= 5 and m.servers == ["sglang"]
    assert m.deltas["prefix_cache_hit_rate"] == pytest.approx(0.4)
    assert m.window_s[0] < m.window_s[1]


@pytest.mark.parametrize("metrics_server", [_tgi], indirect=True)
def test_tgi_style_names_give_the_mapped_deltas(tmp_path: Path, metrics_server: str) -> None:
    m = _run(tmp_path, metrics_server)["server_metrics"]
    d = m["deltas"]
    assert m["servers"] == ["tgi"]
    scrapes_in_window = len(m["series"]["requests_waiting"]) - 1
    assert d["requests_succeeded"] == 3 * scrapes_in_window > 0
    assert d["generation_tokens"] == 24 * scrapes_in_window
    assert d["requests_running_max"] == 4 and d["prefix_cache_hit_rate"] is None


def test_a_dead_metrics_endpoint_leaves_the_verdict_with_a_warning(tmp_path: Path) -> None:
    settings = settings_from_mapping(SERVER | {"server_metrics": "http://127.0.0.1:9/metrics",
                                               "server_metrics_interval_s": 0.1})
    result = run_test(settings, SPEC, out_dir=tmp_path)  # port 9 (discard): nothing listens
    load = result.environment.get("host_load")  # the issue-lag reason names a busy host
    alone = evaluate(RunPlan.of(settings), result.stats,  # the same figures, no server view
                     host=None if load is None else HostLoad.from_dict(load))
    assert (result.valid, result.verdict.reasons) == (alone.valid, alone.reasons)
    (warning,) = set(result.verdict.warnings) - set(alone.warnings)
    assert warning.startswith("server_metrics: http://127.0.0.1:9/metrics could not be scraped")
    doc = json.loads((tmp_path / "result.json").read_text())
    m = doc["server_metrics"]
    assert m["scrapes"] == 0 and m["failed_scrapes"] > 0 and m["errors"]
    assert warning in doc["warnings"]
    assert "Server    : no metrics" in (tmp_path / "summary.txt").read_text()
