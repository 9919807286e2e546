"""Report edges: the last, partial window is no throughput cliff; a run with no errors gets
no empty errors chart; the components chart keeps room for its labels."""

from __future__ import annotations

from pathlib import Path

from loadgen.api import run_test
from loadgen.judge.stats import ComponentSummary, LatencySummary
from loadgen.plan.settings import load_settings
from loadgen.report import charts
from loadgen.report.html import build_report

WINDOWS = [{"start_s": 0.0, "end_s": 1.0, "queries": 100, "good": 100},
           {"start_s": 1.0, "end_s": 2.0, "queries": 100, "good": 90},
           {"start_s": 2.0, "end_s": 3.0, "queries": 50, "good": 50}]


def _y(chart: charts.Chart) -> list[float]:
    return list(chart.data[0]["y"])


def test_a_partial_last_window_counts_the_time_it_ran() -> None:
    assert _y(charts.throughput_chart(WINDOWS)) == [100, 100, 50]  # no end known: as before
    half = charts.throughput_chart(WINDOWS, end_s=2.5)
    assert _y(half) == [100, 100, 100] and half.data[0]["x"][-1] == 2.25
    sliver = charts.throughput_chart(WINDOWS, end_s=2.05)  # ran 5% of its window
    assert _y(sliver) == [100, 100]


def test_no_errors_no_errors_chart_and_the_run_charts_have_no_cliff(tmp_path: Path) -> None:
    result = run_test(load_settings(None, ["preset='dev'", "min_duration_s=2.5",
                                           "min_query_count=20", "target_qps=200",
                                           "target_latency_ms=50", "energy='off'"]),
                      "sim:service=const:1ms,servers=2", out_dir=tmp_path)
    assert result.stats.errors == 0
    page = build_report(tmp_path).read_text()
    assert "Throughput and goodput over time" in page and "Errors over time" not in page


def test_the_components_chart_makes_room_for_its_labels() -> None:
    lat = LatencySummary(p50=1, p90=2, p95=2, p99=3, p999=3, mean=1, min=1, max=3, count=1)
    chart = charts.components_chart({"batch_formation": ComponentSummary(lat, 0.5),
                                     "queue": ComponentSummary(lat, 0.5)})
    assert chart.layout["yaxis"]["automargin"] is True
