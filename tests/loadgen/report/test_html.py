"""report.html for a run, a sweep and a find-peak directory: self-contained (the Plotly
library inline, no external asset), parseable, one chart per section with its data; charts
appear when their data does. (tests/loadgen/ux/test_report_browser.py opens them in Chromium.)"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from loadgen.campaigns.launch import launch
from loadgen.campaigns.search import SearchConfig, find_peak
from loadgen.campaigns.sweep import parse_axis, run_sweep
from loadgen.cli.main import main
from loadgen.plan.settings import load_settings
from loadgen.report.charts import LoadPoint, knee
from loadgen.report.html import build_report
from tests.loadgen.campaigns.test_search import FakeSut

TINY = ["preset='dev'", "min_duration_s=0.3", "warmup_s=0", "min_query_count=100",
        "target_latency_ms=5", "target_qps=400"]


class Page(HTMLParser):
    """Collects tags, their attributes, scripts and section titles."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.scripts: list[str] = []
        self.titles: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.attrs += attrs
        self._in = tag

    def handle_data(self, data: str) -> None:
        if self._in == "h2":
            self.titles.append(data)
        elif self._in == "script":
            self.scripts.append(data)

    def handle_endtag(self, tag: str) -> None:
        self._in = None


def _figures(page: Page) -> list[dict[str, Any]]:
    draw = page.scripts[-1]
    match = re.match(r"const FIGURES=(.*),CONFIG=", draw)
    assert match is not None, draw[:200]
    return list(json.loads(match.group(1).replace("<\\/", "</")))


def _check(path: Path) -> Page:
    assert path.name == "report.html"
    text = path.read_text()
    page = Page()
    page.feed(text)
    page.close()
    assert text.startswith("<!DOCTYPE html>") and "h1" in page.tags
    assert "link" not in page.tags and "img" not in page.tags and "iframe" not in page.tags
    assert not [a for a in page.attrs if a[0] in ("src", "href")]  # nothing fetched
    assert len(page.scripts) == 2 and "Plotly" in page.scripts[0]  # the library, once
    figures = _figures(page)
    charts = [t for t in page.titles if t not in ("Errors", "Points", "Probes", "Tokens", "Energy",
                                                   "Goodput", "Turns")]
    assert len(figures) == len(charts)
    for figure in figures:
        assert figure["data"] and all(trace.get("type") for trace in figure["data"])
    return page


def test_knee() -> None:
    pts = [LoadPoint(x, {"p99": p99}, x, x, True) for x, p99 in
           ((100, 1e6), (200, 2e6), (300, 6e6), (400, 3e6))]
    assert knee(pts, 5e6) == 200  # the last load before p99 first crosses the SLO
    assert knee(pts, None) == 200  # without an SLO: before p99 doubles from the lowest load
    assert knee([], 5e6) is None


def test_run_report(tmp_path: Path) -> None:
    run = tmp_path / "run"
    launch(load_settings("scenarios/server.toml", [*TINY, "window_s=0.1"]),
           "sim:service=const:1ms", run)
    page = _check(build_report(run))
    assert page.titles == ["Latency over time", "Throughput and goodput over time",
                           "Latency by percentile", "Issue lag by percentile",
                           "Energy"]  # no errors: no errors chart
    # batch sizes and components are drawn when the result has them
    doc = json.loads((run / "result.json").read_text())
    doc |= {"batch_sizes": {"1": 40, "4": 10},
            "components_ns": {"queue": {"mean": 1e5, "p99": 4e5, "share": 0.1},
                              "compute": {"mean": 9e5, "p99": 1e6, "share": 0.9}}}
    (run / "result.json").write_text(json.dumps(doc))
    page = _check(build_report(run))
    assert page.titles[-3:] == ["Latency components", "Batch sizes", "Energy"]
    assert '<span class="verdict' in (run / "report.html").read_text()


def test_token_run_shows_its_token_charts_and_tables(tmp_path: Path) -> None:
    run = tmp_path / "run"
    tokens = ["preset='dev'", "min_duration_s=0.5", "warmup_s=0", "min_query_count=40",
              "target_qps=40", "input_tokens=32", "output_tokens=8"]
    launch(load_settings("scenarios/llm_server.toml", tokens),
           "llmsim:step_base=1ms,step_per_seq=50us,prefill_per_token=5us,max_seqs=16", run)
    page = _check(build_report(run))
    assert "Token latencies" in page.titles and "TTFT by percentile" in page.titles
    chart = next(f for f in _figures(page) if f["data"][0]["name"] == "p50"
                 and f["layout"]["barmode"] == "group")
    names = chart["data"][0]["x"]
    assert "ttft from schedule" in names and "ttft from send" in names and "tpot" in names
    doc = json.loads((run / "result.json").read_text())
    p99_ms = [v for n, v in zip(names, chart["data"][2]["y"], strict=True) if n == "tpot"]
    assert p99_ms == [pytest.approx(doc["tpot_ns"]["p99"] / 1e6)]
    assert "output tokens/s" in (run / "report.html").read_text()


def test_sweep_report(tmp_path: Path) -> None:
    settings = load_settings("scenarios/server.toml", [*TINY, "target_latency_ms=1000"])
    run_sweep(settings, "null", [parse_axis("target_qps=200,400")], 1, tmp_path)
    page = _check(build_report(tmp_path))
    assert page.titles == ["Latency against load", "Goodput (within the SLO) against load",
                           "Latency by percentile", "Points"]
    load = _figures(page)[0]
    assert [t["name"] for t in load["data"] if t["name"].startswith("knee")] == ["knee 400"]
    assert any(t["name"] == "SLO 1000 ms" for t in load["data"])


def test_a_noisy_sweep_point_names_its_metric_at_the_top(tmp_path: Path) -> None:
    settings = load_settings("scenarios/server.toml", TINY)
    run_sweep(settings, "null", [parse_axis("target_qps=200")], 1, tmp_path)
    doc = json.loads((tmp_path / "sweep.json").read_text())
    doc["points"][0]["noisy_metrics"] = ["latency_p99_ns"]
    doc["points"][0]["stats"]["latency_p99_ns"]["cv"] = 0.081
    (tmp_path / "sweep.json").write_text(json.dumps(doc))
    h1 = re.search(r"<h1>(.*?)</h1>", build_report(tmp_path).read_text())
    assert h1 is not None and h1.group(1).startswith("NOISY (latency_p99_ns cv 8.1%)")


def test_find_peak_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = load_settings(None, ["preset='dev'", "target_latency_ms=2", "target_qps=100"])
    cfg = SearchConfig(start_qps=100, tolerance=0.05)
    find_peak(settings, "sim:", tmp_path, cfg, runner=FakeSut(capacity=1000))
    page = _check(build_report(tmp_path))
    assert page.titles[:2] == ["Latency against load", "Goodput (within the SLO) against load"]
    assert page.titles[-1] == "Probes"
    (tmp_path / "report.html").unlink()
    assert main(["report", str(tmp_path)]) == 0
    assert (tmp_path / "report.html").is_file() and "wrote" in capsys.readouterr().out


def test_comparison_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = load_settings("scenarios/server.toml", [*TINY, "window_s=0.1"])
    for servers in (1, 2):
        launch(settings, f"sim:service=const:1ms,servers={servers}", tmp_path / f"s{servers}")
    out = tmp_path / "cmp"
    assert main(["compare", str(tmp_path / "s1"), str(tmp_path / "s2"), "--vary", "sut",
                 "--out", str(out)]) == 0
    assert "compare.json" in capsys.readouterr().out
    doc = json.loads((out / "compare.json").read_text())
    assert len(doc["a_results"]) == len(doc["b_results"]) == 1 and not doc["mismatch"]
    (out / "report.html").unlink()
    assert main(["report", str(out)]) == 0
    page = _check(out / "report.html")
    assert page.titles[:3] == ["B against A, per metric, with 95% intervals",
                               "Latency by percentile", "p99 over time"]
    assert "differs: sut.servers: 1 -&gt; 2" in (out / "report.html").read_text()


def test_offline_report_shows_the_samples_spectrum(tmp_path: Path) -> None:
    run = tmp_path / "run"
    launch(load_settings("scenarios/offline.toml", ["preset='dev'", "min_duration_s=0.3"]),
           "sim:service=const:1ms", run)
    page = _check(build_report(run))
    assert page.titles == ["Latency by percentile", "Energy"]  # one query: no issue-lag spectrum
    assert _figures(page)[0]["data"][0]["name"].startswith("samples, from schedule")
