"""Sweeps: grid syntax, SUT spec rewriting, median and spread over independent launches."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from loadgen.adapters import registry
from loadgen.campaigns.sweep import (
    aggregate,
    launch,
    parse_axis,
    run_sweep,
    set_sut_option,
    spread,
    vary,
)
from loadgen.errors import SettingsError, SutSpecError
from loadgen.plan import settings as lg_settings
from loadgen.plan.settings import load_settings
from loadgen.report.result import RunResult
from loadgen.report.sweepdoc import MetricSpread, SweepDocument, SweepPoint
from tests.fairness import skip_if_host_busy
from tests.loadgen.campaigns.test_search import fake_document

DATA = Path(__file__).parents[2] / "data" / "records"


@pytest.mark.parametrize(("text", "key", "values"), [
    ("target_qps=100,200", "target_qps", (100, 200)),
    ("target_qps=100:400:100", "target_qps", (100, 200, 300, 400)),
    ("target_qps=100:350:100", "target_qps", (100, 200, 300)),
    ("min_duration_s=0.5:1.5:0.5", "min_duration_s", (0.5, 1.0, 1.5)),
    ("arrival=poisson,constant", "arrival", ("poisson", "constant")),
    ("sut.max_batch_size=1,8,32", "sut.max_batch_size", ("1", "8", "32")),
    ("sut.servers=1:3:1", "sut.servers", ("1", "2", "3")),
    ("sut.service=const:1ms,exp:1ms", "sut.service", ("const:1ms", "exp:1ms")),
    ("batcher.max_queue_delay_us=0,500", "batcher.max_queue_delay_us", (0, 500)),
    ("batcher.max_batch_size=8:32:8", "batcher.max_batch_size", (8, 16, 24, 32)),
])
def test_parse_axis(text: str, key: str, values: tuple[object, ...]) -> None:
    axis = parse_axis(text)
    assert (axis.key, axis.values) == (key, values)
    assert axis.is_sut == key.startswith("sut.")
    assert axis.is_batcher == key.startswith("batcher.")


@pytest.mark.parametrize("text", ["target_qps", "target_qps=", "target_qps=5:1:1",
                                  "target_qps=1:5:0", "target_qps=1:100000:1", "sut.=1,2",
                                  "batcher.=1,2", "batcher.max_batch_size=8,big",
                                  "batcher.max_queue_delay_us=0.5,1",
                                  "batcher.max_queue_delay_us=0:1:0.5"])
def test_parse_axis_refuses(text: str) -> None:
    with pytest.raises(SettingsError):
        parse_axis(text)


@pytest.mark.parametrize(("spec", "key", "value", "expected"), [
    ("builtin:mlp,max_batch_size=8", "max_batch_size", "32", "builtin:mlp,max_batch_size=32"),
    ("builtin:mlp", "max_batch_size", "32", "builtin:mlp,max_batch_size=32"),
    ("builtin:mlp,workers=2,max_batch_size=8", "workers", "1",
     "builtin:mlp,workers=1,max_batch_size=8"),
    ("sim:service=const:2ms,servers=1", "servers", "2", "sim:service=const:2ms,servers=2"),
    ("sim:", "servers", "3", "sim:servers=3"),
])
def test_set_sut_option(spec: str, key: str, value: str, expected: str) -> None:
    assert set_sut_option(spec, key, value) == expected


def test_set_sut_option_needs_options() -> None:
    with pytest.raises(SutSpecError):
        set_sut_option("null", "servers", "2")


def test_vary_validates() -> None:
    base = load_settings("scenarios/server.toml", ["preset='dev'"])
    assert vary(base, {"target_qps": 300}).target_qps == 300.0
    assert vary(base, {}) == base
    with pytest.raises(SettingsError):
        vary(base, {"target_qps": -1})


def _result(figures: dict[str, Any]) -> RunResult:
    """A result read from a complete version-1 document with `figures` put over it."""
    settings = load_settings(None, ["preset='dev'", "target_latency_ms=2", "target_qps=100"])
    return RunResult.from_dict(fake_document(settings, 0.5) | figures)


def test_spread_and_noise() -> None:
    assert spread([3.0, 1.0, 2.0]) == MetricSpread(median=2.0, min=1.0, max=3.0, cv=0.5, n=3)
    assert spread([5.0]).cv is None
    steady = {"qps_scheduled": 100.0, "qps_completed": 100.0, "goodput_qps": 100.0,
              "samples_per_s": 100.0, "query_latency_ns": {"p50": 10, "p90": 20, "p99": 30},
              "headline": {"name": "scheduled_qps", "value": 100.0}, "valid": True,
              "duration_s": 1.0}
    jumpy = steady | {"query_latency_ns": {"p50": 10, "p90": 20, "p99": 60}}
    agg = aggregate([_result(steady), _result(steady)])
    assert not agg.noisy and agg.stats["latency_p99_ns"].cv == 0
    agg = aggregate([_result(steady), _result(jumpy)])
    assert agg.noisy and agg.noisy_metrics == ("latency_p99_ns",)
    assert agg.stats["latency_p99_ns"].median == 45 and agg.valid_launches == 2


TINY = ["preset='dev'", "min_duration_s=0.2", "warmup_s=0", "min_query_count=50",
        "target_latency_ms=50"]


def test_sweep_launches_are_fresh_and_aggregated(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    make_sut = registry.make_sut
    monkeypatch.setattr(registry, "make_sut", lambda spec: built.append(spec) or make_sut(spec))
    settings = load_settings("scenarios/server.toml", TINY)
    axes = [parse_axis("target_qps=200,400")]
    doc = run_sweep(settings, "null", axes, 2, tmp_path).as_dict()
    assert len(built) == 4  # a fresh SUT for every launch
    assert [p["values"] for p in doc["points"]] == [{"target_qps": 200}, {"target_qps": 400}]
    for point in doc["points"]:
        stats = point["stats"]
        assert set(stats) >= {"qps_completed", "goodput_qps", "latency_p50_ns",
                              "latency_p99_ns", "samples_per_s"}
        assert stats["qps_completed"]["n"] == 2
        assert stats["qps_completed"]["min"] <= stats["qps_completed"]["median"] \
            <= stats["qps_completed"]["max"]
        assert point["noisy"] == any(s["cv"] > 0.05 for s in stats.values())
        assert "x 2 launches, median; spread" in point["headline"]
        results = [json.loads((tmp_path / d / "result.json").read_text())
                   for d in point["launch_dirs"]]
        assert results[0]["seeds"]["schedule"] != results[1]["seeds"]["schedule"]
        assert results[0]["settings"]["target_qps"] == point["values"]["target_qps"]
    rows = list(csv.DictReader((tmp_path / "sweep.csv").read_text().splitlines()))
    assert len(rows) == 2 and rows[1]["target_qps"] == "400"
    assert {"qps_completed_median", "qps_completed_min", "qps_completed_max",
            "qps_completed_cv", "latency_p99_ns_cv"} <= set(rows[0])
    saved = json.loads((tmp_path / "sweep.json").read_text())
    assert saved["launches"] == 2 and saved["grid"] == {"target_qps": [200, 400]}
    again = run_sweep(settings, "null", axes, 2, tmp_path)  # resumes: reuses all four
    assert len(built) == 4 and again.as_dict()["points"][0]["stats"] == doc["points"][0]["stats"]


@pytest.mark.serial  # p99 on one and two servers; skips on a loaded host
def test_sweep_over_sut_knobs(tmp_path: Path) -> None:
    settings = load_settings("scenarios/server.toml", [*TINY, "target_qps=300"])
    axes = [parse_axis("sut.servers=1,2")]
    doc = run_sweep(settings, "sim:service=const:1ms,servers=1", axes, 1, tmp_path).as_dict()
    assert [p["sut"] for p in doc["points"]] == ["sim:service=const:1ms,servers=1",
                                                  "sim:service=const:1ms,servers=2"]
    assert [p["sut_description"]["servers"] for p in doc["points"]] == [1, 2]
    assert doc["points"][0]["stats"]["qps_completed"]["cv"] is None
    p99 = [p["stats"]["latency_p99_ns"]["median"] for p in doc["points"]]
    if p99[1] >= p99[0]:
        for point in doc["points"]:
            result = json.loads((tmp_path / point["launch_dirs"][0] / "result.json").read_text())
            skip_if_host_busy(result, f"p99 {p99[1] / 1e6:.2f} ms on two servers, "
                              f"{p99[0] / 1e6:.2f} ms on one")
    assert p99[1] < p99[0]  # two servers queue less at the same load


def test_sweep_refuses_bad_points_before_running(tmp_path: Path) -> None:
    settings = load_settings("scenarios/server.toml", TINY)
    with pytest.raises(SettingsError, match="target_qps"):
        run_sweep(settings, "null", [parse_axis("target_qps=100,-5")], 1, tmp_path)
    assert not (tmp_path / "points").exists()


class FakeBatcher:
    """A remote batcher's knobs, read and retuned as `batcher_control.batcher_knobs` does."""

    def __init__(self) -> None:
        self.knobs: dict[str, object] = {"max_batch_size": 8, "max_queue_delay_us": 100,
                                         "preferred_batch_sizes": [], "max_queue_size": 1024}
        self.calls: list[dict[str, object] | None] = []

    def __call__(self, spec: str, knobs: Mapping[str, object] | None) -> dict[str, object]:
        assert spec == REMOTE
        self.calls.append(None if knobs is None else dict(knobs))
        self.knobs |= knobs or {}
        return dict(self.knobs)


REMOTE = "http://127.0.0.1:9/mlp"


def test_sweep_retunes_a_remote_batcher_per_point_and_puts_it_back(tmp_path: Path) -> None:
    server, seen = FakeBatcher(), []

    def runner(settings: lg_settings.TestSettings, spec: str, run_dir: Path) -> RunResult:
        seen.append(server.knobs["max_queue_delay_us"])
        return launch(settings, "null", run_dir)

    settings = load_settings("scenarios/server.toml", TINY)
    axes = [parse_axis("batcher.max_queue_delay_us=0,2000"), parse_axis("target_qps=200,400")]
    doc = run_sweep(settings, REMOTE, axes, 1, tmp_path, runner=runner,
                    retune=server).as_dict()
    assert seen == [0, 0, 2000, 2000]
    assert [p["batcher"]["max_queue_delay_us"] for p in doc["points"]] == [0, 0, 2000, 2000]
    assert server.calls[0] is None and server.calls[-1] == {"max_queue_delay_us": 100}
    assert server.knobs["max_queue_delay_us"] == 100
    stamp = json.loads((tmp_path / doc["points"][3]["launch_dirs"][0] / "launch.json").read_text())
    assert stamp["batcher"] == {"max_queue_delay_us": 2000}
    calls = len(server.calls)
    run_sweep(settings, REMOTE, axes, 1, tmp_path, runner=runner, retune=server)
    assert len(seen) == 4 and len(server.calls) == calls + 6  # reused; still retuned and put back


def test_a_failed_launch_still_puts_the_remote_batcher_back(tmp_path: Path) -> None:
    server = FakeBatcher()

    def runner(settings: lg_settings.TestSettings, spec: str, run_dir: Path) -> RunResult:
        raise RuntimeError("the launch failed")

    settings = load_settings("scenarios/server.toml", TINY)
    with pytest.raises(RuntimeError):
        run_sweep(settings, REMOTE, [parse_axis("batcher.max_batch_size=1,2")], 1, tmp_path,
                  runner=runner, retune=server)
    assert server.calls == [None, {"max_batch_size": 1}, {"max_batch_size": 8}]


@pytest.mark.parametrize(("spec", "axis", "words"), [
    ("builtin:mlp", "batcher.max_batch_size=1,2", "not an http"),
    (REMOTE, "batcher.max_batch_sise=1,2", "no such knob; it has max_batch_size"),
])
def test_batcher_axes_are_refused_before_running(tmp_path: Path, spec: str, axis: str,
                                                 words: str) -> None:
    server = FakeBatcher()
    settings = load_settings("scenarios/server.toml", TINY)
    with pytest.raises(SettingsError, match=words):
        run_sweep(settings, spec, [parse_axis(axis)], 1, tmp_path, retune=server)
    assert not (tmp_path / "points").exists()
    assert all(call is None for call in server.calls)


def test_a_noisy_point_names_its_noisy_metrics() -> None:
    from loadgen.report.headline import noisy_flag

    doc = json.loads((DATA / "sweep.json").read_text())["points"][0]
    stats = doc["stats"] | {"latency_p99_ns": doc["stats"]["latency_p99_ns"] | {"cv": 0.081}}
    point = SweepPoint.from_dict(doc | {"noisy_metrics": ["latency_p99_ns"], "stats": stats})
    assert noisy_flag(point) == "NOISY (latency_p99_ns cv 8.1%)  "
    assert noisy_flag(SweepPoint.from_dict(doc | {"noisy_metrics": []})) == ""


def test_sweep_json_round_trips_byte_for_byte() -> None:
    """sweep.json as main's code wrote it (tests/data/records), read and written again."""
    text = (DATA / "sweep.json").read_text()
    doc = SweepDocument.from_dict(json.loads(text))
    assert json.dumps(doc.as_dict(), indent=2) + "\n" == text
    assert [p.values for p in doc.points][:2] == [{"target_qps": 100, "sut.servers": "1"},
                                                  {"target_qps": 100, "sut.servers": "2"}]
    assert all(p.launches == 2 for p in doc.points)
