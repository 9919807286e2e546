"""Live Prometheus series of a token run: TTFT, TPOT, ITL and E2E histograms and token
counters equal the collector's; a run without streams exports none of them."""

from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.adapters.tokens import TokenStream
from loadgen.live.prometheus import PrometheusExporter
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import load_settings
from loadgen.plan.tokenslo import TokenSlos
from loadgen.record.collect import Collector
from loadgen.record.tokens import TokenRecorder

MS = 1_000_000


def _families(exporter: PrometheusExporter) -> dict[str, object]:
    text = generate_latest(exporter.registry).decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def _sample(family: object, suffix: str) -> float:
    return next(s.value for s in family.samples if s.name.endswith(suffix))  # type: ignore[attr-defined]


def test_token_series_equal_the_collector() -> None:
    c = Collector(slo_ns=2**62, tokens=TokenRecorder(TokenSlos(ttft_ns=3 * MS)))
    for q in range(10):
        s = TokenStream()
        ttft = (1 + q % 5) * MS  # 1..5 ms: six of ten within 3 ms
        for k in range(4):
            s.add(ttft + k * MS, 1)
        s.input_tokens = 7
        c.issued_query(q, 0, 0, 1, True)
        c.streamed(q, ttft + 3 * MS, s)
    exporter = PrometheusExporter(run_id="r1")
    exporter.start(RunPlan.of(load_settings(None, ["preset='dev'", "target_latency_ms=5"])),
                   SimpleNamespace(name="llmsim"), c)  # type: ignore[arg-type]
    f = _families(exporter)
    assert _sample(f["loadgen_ttft_seconds"], "_count") == 10
    assert _sample(f["loadgen_tpot_seconds"], "_count") == 10
    assert _sample(f["loadgen_itl_seconds"], "_count") == 30
    assert _sample(f["loadgen_e2e_seconds"], "_count") == 10
    assert _sample(f["loadgen_tpot_seconds"], "_sum") == pytest.approx(10 * 1e-3, rel=1e-3)
    assert _sample(f["loadgen_input_tokens"], "_total") == 70
    assert _sample(f["loadgen_output_tokens"], "_total") == 40
    assert _sample(f["loadgen_requests_good"], "_total") == 6
    exporter.close()


def test_no_token_series_without_streams() -> None:
    c = Collector(slo_ns=5 * MS)
    c.issued_query(0, 0, 0, 1, True)
    c.done(0, MS)
    exporter = PrometheusExporter(run_id="r2")
    exporter.start(RunPlan.of(load_settings(None, ["preset='dev'", "target_latency_ms=5"])),
                   SimpleNamespace(name="sim"), c)  # type: ignore[arg-type]
    assert not any(name.startswith(("loadgen_ttft", "loadgen_output_tokens"))
                   for name in _families(exporter))
    exporter.close()
