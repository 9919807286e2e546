"""A real multi-turn llmsim run's per-turn figures in report.html (a table and a chart) and
in Prometheus (histograms by turn, later turns folded into the last label)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.api import run_test
from loadgen.live.prometheus import PrometheusExporter
from loadgen.live.turn_metrics import MAX_TURN_LABELS
from loadgen.report.html import build_report
from tests.loadgen.llm.test_multiturn import settings
from tests.loadgen.report.test_html import _check, _figures

TURNS = MAX_TURN_LABELS + 2  # two turns past the cap, to be folded
LLMSIM = "llmsim:step_base=1ms,step_per_seq=100us,prefill_per_token=10us"


@pytest.fixture(scope="module")
def multiturn(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    """The run directory, its result.json `turns`, and the exporter's final scrape."""
    out = tmp_path_factory.mktemp("multiturn")
    with PrometheusExporter(run_id="turns") as exporter:
        run_test(settings(turns=TURNS, think_time_ms=2.0, target_qps=10.0), LLMSIM,
                 out_dir=out, monitors=[exporter])
        scrape = generate_latest(exporter.registry).decode()
    build_report(out)
    return out, json.loads((out / "result.json").read_text())["turns"], scrape


def test_the_report_has_a_turn_table_and_chart(multiturn: tuple[Path, dict[str, Any], str]
                                               ) -> None:
    out, turns, _ = multiturn
    assert sorted(map(int, turns)) == list(range(1, TURNS + 1))
    text = (out / "report.html").read_text()
    page = _check(out / "report.html")
    assert "Turns" in page.titles and "TTFT and TPOT by turn" in page.titles
    table = re.search(r"<h2>Turns</h2><table>(.*?)</table>", text)
    assert table is not None
    rows = re.findall(r"<tr>(.*?)</tr>", table.group(1))[1:]
    assert len(rows) == TURNS
    cells = re.findall(r"<td>(.*?)</td>", rows[-1])
    assert cells[:2] == [str(TURNS), str(turns[str(TURNS)]["count"])]
    assert float(cells[2]) == pytest.approx(turns[str(TURNS)]["ttft_ns"]["p50"] / 1e6)
    chart = next(f for f in _figures(page)
                 if {t["name"] for t in f["data"]} == {"TTFT p50", "TTFT p99", "TPOT p50",
                                                      "TPOT p99"})
    for trace in chart["data"]:
        metric, pct = trace["name"].lower().split()
        assert trace["x"] == list(range(1, TURNS + 1))
        assert trace["y"] == pytest.approx([turns[str(k)][f"{metric}_ns"][pct] / 1e6
                                            for k in range(1, TURNS + 1)])


def test_prometheus_has_turn_histograms_with_bounded_labels(
        multiturn: tuple[Path, dict[str, Any], str]) -> None:
    _, turns, scrape = multiturn
    families = {f.name: f for f in text_string_to_metric_families(scrape)}
    labels = [str(k) for k in range(1, MAX_TURN_LABELS)] + [f"{MAX_TURN_LABELS}+"]
    for name, key in (("loadgen_turn_ttft_seconds", "ttft_ns"),
                      ("loadgen_turn_tpot_seconds", "tpot_ns")):
        counts = {s.labels["turn"]: s.value for s in families[name].samples
                  if s.name.endswith("_count")}
        assert list(counts) == labels
        for k in range(1, MAX_TURN_LABELS):
            assert counts[str(k)] == turns[str(k)][key]["count"] > 0
        folded = sum(turns[str(k)][key]["count"] for k in range(MAX_TURN_LABELS, TURNS + 1))
        assert counts[f"{MAX_TURN_LABELS}+"] == folded
        infinite = {s.labels["turn"]: s.value for s in families[name].samples
                    if s.name.endswith("_bucket") and s.labels["le"] == "+Inf"}
        assert infinite == counts


def test_a_run_without_sessions_exports_no_turn_series() -> None:
    with PrometheusExporter(run_id="single") as exporter:
        run_test(settings(), LLMSIM, monitors=[exporter])
        scrape = generate_latest(exporter.registry).decode()
    assert "loadgen_ttft_seconds" in scrape and "loadgen_turn_" not in scrape
