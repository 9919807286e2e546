"""Self-calibration: the ceiling search, the cache, and the warning before a run."""

import json

import pytest

from loadgen.campaigns import calibrate as cal
from loadgen.cli.main import main
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import load_settings


@pytest.fixture(autouse=True)
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(cal.CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _plan(*overrides):
    return RunPlan.of(load_settings(None, list(overrides)))


def _threshold(limit):
    calls = []

    def probe(qps):
        calls.append(qps)
        return qps <= limit, {"issue_lag_p99_ns": 1000 if qps <= limit else 9_000_000}

    return probe, calls


def test_find_ceiling_doubles_then_bisects():
    probe, calls = _threshold(37_000)
    ceiling, figures = cal.find_ceiling(probe, 5000, steps=5)
    assert calls[:5] == [5000, 10000, 20000, 40000, 30000]
    assert 37_000 - 40_000 / 2**5 <= ceiling <= 37_000  # within the last bisection step
    assert figures["issue_lag_p99_ns"] == 1000
    assert cal.find_ceiling(_threshold(10)[0], 5000, steps=5) == (0.0, {})


def test_find_ceiling_comes_down_when_the_first_rate_fails():
    probe, calls = _threshold(3000)
    ceiling, _ = cal.find_ceiling(probe, 8000, steps=4)
    assert calls[:3] == [8000, 4000, 2000]  # down until one passes, then bisect 2000..4000
    assert 2875 <= ceiling <= 3000


def test_adapter_kinds():
    assert {cal.adapter_kind(s) for s in ("null", "sim:service=exp:1ms", "builtin:mlp")} == {
        "inprocess"}
    assert cal.adapter_kind("https://h/m") == cal.adapter_kind("http://h:1/m") == "http"
    assert cal.adapter_kind("grpc://h:1/m") == "grpc"


def test_calibration_is_stored_by_kind_and_warns_above_headroom(cache_dir):
    entry = cal.calibrate("sim:service=const:1ms", probe=_threshold(20_000)[0], steps=3)
    assert entry["spec"] == "null" and 17_500 <= entry["ceiling_qps"] <= 20_000
    path = cal.save_calibration("inprocess", entry)
    cal.save_calibration("http", {"ceiling_qps": 1000.0})
    assert path == cache_dir / "calibration.json"
    assert set(cal.load_calibration()) == {"inprocess", "http"}
    ceiling = entry["ceiling_qps"]

    def warning(*extra):
        return cal.headroom_warning(_plan("target_latency_ms=5", *extra), "null")

    assert warning(f"target_qps={0.6 * ceiling}") is None
    assert "above 70%" in warning(f"target_qps={0.8 * ceiling}")
    assert warning(f"target_qps={0.8 * ceiling}", "workers=2") is None  # per process
    # a burst's peak counts, not its mean
    assert "above 70%" in warning(f"target_qps={0.3 * ceiling}", "arrival='burst'",
                                  "burst_qps_factor=3", "burst_duration_s=1")
    assert warning("scenario='SingleStream'") is None
    assert cal.headroom_warning(_plan("target_latency_ms=5", "target_qps=9999"),
                                "grpc://h:1/m") is None  # never calibrated


def test_no_calibration_no_warning_and_corrupt_cache_is_ignored(cache_dir):
    s = _plan("target_latency_ms=5", "target_qps=1e9")
    assert cal.headroom_warning(s, "null") is None
    cache_dir.mkdir()
    (cache_dir / "calibration.json").write_text("{not json")
    assert cal.load_calibration() == {} and cal.headroom_warning(s, "null") is None


def test_cli_calibrate_writes_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(cal, "_probe_for", lambda spec, duration_s: _threshold(12_000)[0])
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--sut", "null", "--out", str(out), "--steps", "2"]) == 0
    doc = json.loads(out.read_text())
    assert 10_000 <= doc["inprocess"]["ceiling_qps"] <= 12_000
    assert "keeps up" in capsys.readouterr().out


def test_a_real_probe_on_the_null_sut():
    _, figures = cal._probe_for("null", 0.2)(500)
    assert set(figures) == {"issue_lag_p99_ns", "latency_p99_ns", "errors"}
    assert figures["errors"] == 0
