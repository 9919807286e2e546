"""report.html for a run, a sweep and a find-peak directory: self-contained, parseable,
every image a PNG that decodes; plots appear when their data does."""

from __future__ import annotations

import base64
import io
import json
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from loadgen.campaigns.launch import launch
from loadgen.campaigns.search import SearchConfig, find_peak
from loadgen.campaigns.sweep import parse_axis, run_sweep
from loadgen.cli.main import main
from loadgen.plan.settings import load_settings
from loadgen.report.html import build_report, report_png
from loadgen.report.plots import LoadPoint, knee
from tests.loadgen.test_search import FakeSut

TINY = ["preset='dev'", "min_duration_s=0.3", "warmup_s=0", "min_query_count=100",
        "target_latency_ms=5", "target_qps=400"]


class Page(HTMLParser):
    """Collects tags, image sources and section titles."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.images: list[str] = []
        self.titles: list[str] = []
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._in = tag
        if tag == "img":
            self.images.append(dict(attrs)["src"] or "")

    def handle_data(self, data: str) -> None:
        if self._in == "h2":
            self.titles.append(data)

    def handle_endtag(self, tag: str) -> None:
        self._in = None


def _check(path: Path) -> Page:
    assert path.name == "report.html"
    text = path.read_text()
    page = Page()
    page.feed(text)
    page.close()
    assert text.startswith("<!DOCTYPE html>") and "h1" in page.tags
    assert "script" not in page.tags and "link" not in page.tags  # no external assets
    assert "http://" not in text and "https://" not in text
    for src in page.images:
        prefix = "data:image/png;base64,"
        assert src.startswith(prefix)
        with Image.open(io.BytesIO(base64.b64decode(src[len(prefix):]))) as image:
            image.verify()
            assert image.format == "PNG" and image.size[0] > 300
    return page


def test_knee() -> None:
    pts = [LoadPoint(x, {"p99": p99}, x, x, True) for x, p99 in
           ((100, 1e6), (200, 2e6), (300, 6e6), (400, 3e6))]
    assert knee(pts, 5e6) == 200  # the last load before p99 first crosses the SLO
    assert knee(pts, None) == 200  # without an SLO: before p99 doubles from the lowest load
    assert knee([], 5e6) is None


def test_run_report(tmp_path: Path) -> None:
    run = tmp_path / "run"
    launch(load_settings("scenarios/server.toml", TINY), "sim:service=const:1ms", run)
    page = _check(build_report(run))
    assert page.titles[0] == "Spectrum" and len(page.images) >= 1
    # timeline, batch sizes and components are drawn when the result has them
    doc = json.loads((run / "result.json").read_text())
    doc |= {"timeline": [{"start_s": i, "end_s": i + 1, "queries": 10, "good": 9,
                          "errors": i % 2, "latency_ns": {"p50": 1e6, "p99": 3e6}}
                         for i in range(5)],
            "batch_sizes": {"1": 40, "4": 10},
            "components_ns": {"queue": {"mean": 1e5, "p99": 4e5},
                              "compute": {"mean": 9e5, "p99": 1e6}}}
    (run / "result.json").write_text(json.dumps(doc))
    page = _check(build_report(run))
    assert page.titles == ["Spectrum", "Timeline", "Batch sizes", "Components", "Energy"]


def test_sweep_report(tmp_path: Path) -> None:
    settings = load_settings("scenarios/server.toml", TINY)
    run_sweep(settings, "null", [parse_axis("target_qps=200,400")], 1, tmp_path)
    page = _check(build_report(tmp_path))
    assert page.titles == ["Latency against load", "Goodput against load", "Spectrum", "Points"]
    assert len(page.images) == 3


def test_find_peak_report_and_png(tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    settings = load_settings(None, ["preset='dev'", "target_latency_ms=2", "target_qps=100"])
    cfg = SearchConfig(start_qps=100, tolerance=0.05)
    find_peak(settings, "sim:", tmp_path, cfg, runner=FakeSut(capacity=1000))
    page = _check(build_report(tmp_path))
    assert page.titles[:3] == ["Latency against load", "Goodput against load", "Spectrum"]
    assert page.titles[-1] == "Probes"
    png = report_png(tmp_path, tmp_path / "report.png")
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size[0] > 1000
    (tmp_path / "report.html").unlink()
    assert main(["report", str(tmp_path), "--png", str(tmp_path / "again.png")]) == 0
    assert (tmp_path / "report.html").is_file() and "wrote" in capsys.readouterr().out
