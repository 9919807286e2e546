"""Whole runs: a real `loadgen run` on this host, and runs metering a fake GPU and CPU package."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from loadgen.api import run_test
from loadgen.live.prometheus import PrometheusExporter
from loadgen.plan.settings import settings_from_mapping
from loadgen.report.html import build_report
from loadgen.report.result import read_result
from loadgen.report.summary import render_summary

from .fakes import FakeGpu, fake_nvml, rapl_zone

ROOT = Path(__file__).resolve().parents[3]
SUT = "sim:service=exp:1ms,servers=4"
QUICK = {"preset": "dev", "target_qps": 200.0, "target_latency_ms": 50.0,
         "min_duration_s": 1.0, "min_query_count": 50, "warmup_s": 0.2,
         "energy_sample_hz": 50.0, "energy_idle_s": 0.2}


@pytest.fixture
def fake_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    """A host whose `pynvml` is the fake (one 100 W GPU) and whose powercap is a tmp tree."""
    gpu = FakeGpu(watts=100.0)
    monkeypatch.setitem(sys.modules, "pynvml", fake_nvml([gpu]))
    root = tmp_path / "powercap"
    rapl_zone(root, "intel-rapl:0", "package-0", 123_456)
    monkeypatch.setattr("loadgen.record.energy.POWERCAP_ROOT", root)
    return gpu


@pytest.mark.functional
def test_a_real_run_here_says_what_was_and_was_not_measured_and_why(tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "loadgen", "run", str(ROOT / "scenarios/server.toml"),
           "--sut", SUT, "--out", str(out), "--set", "preset='dev'",
           "--set", "min_duration_s=1", "--set", "target_qps=200"]
    subprocess.run(cmd, cwd=ROOT, check=False, capture_output=True, timeout=120)
    energy = json.loads((out / "result.json").read_text())["energy"]
    seen = [d["name"] for d in energy["devices"]] + [u["source"] for u in energy["unmeasured"]]
    assert any(s.startswith("gpu") for s in seen) and any(s.startswith("cpu") for s in seen)
    assert all(u["reason"] for u in energy["unmeasured"])
    if not energy["measured"]:  # this CPU-only machine: nothing stands in for the unknowns
        assert energy["devices"] == [] and energy["reason"].startswith("nothing could be")
        assert all(energy[k] is None for k in ("joules", "avg_w", "peak_w", "idle_w",
                                               "joules_per_query", "qps_per_watt"))
        assert "Energy    : not measured: nothing could be measured" in (
            out / "summary.txt").read_text()


def test_a_metered_run_integrates_the_fake_gpu_over_the_measured_window(
        fake_host: FakeGpu, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    exporter = PrometheusExporter(registry, run_id="r1")
    result = run_test(settings_from_mapping(QUICK), SUT, tmp_path / "run", monitors=[exporter])
    e = result.energy
    assert e is not None and e.measured, e
    assert [d.name for d in e.devices] == ["gpu0", "cpu-package-0"]
    assert e.host == socket.gethostname()
    assert e.method == "nvml_energy_counter+rapl_energy_counter"
    assert e.window_s == pytest.approx(result.stats.duration_s, rel=1e-6)
    assert e.joules == pytest.approx(100.0 * result.stats.duration_s, rel=1e-3)
    assert e.avg_w == pytest.approx(100.0, rel=1e-3) and e.peak_w == pytest.approx(100.0)
    assert e.idle_w == pytest.approx(100.0, rel=1e-2)
    assert e.active_joules is not None and abs(e.active_joules) < 0.02 * e.joules
    assert e.joules_per_query == pytest.approx(e.joules / result.stats.queries)
    assert e.qps_per_watt == pytest.approx(result.stats.qps_completed / e.avg_w)
    assert e.devices[0].util_pct_avg == 40.0 and e.devices[0].memory_used_peak_bytes == 3 << 30
    assert e.devices[1].joules == 0.0  # the fake package's counter stood still
    assert e.samples is not None and e.samples >= 2
    back = read_result(tmp_path / "run")
    assert back.energy == e
    assert "Energy    : " in render_summary(back) and "J/query" in render_summary(back)
    page = build_report(tmp_path / "run").read_text()
    assert "<h2>Energy</h2>" in page and "NVIDIA Fake H100" in page
    value = registry.get_sample_value
    labels = {"scenario": "Server", "sut": "sim", "run_id": "r1"}
    assert value("loadgen_energy_measured", labels) == 1.0
    assert value("loadgen_energy_joules", labels) == pytest.approx(e.joules)
    assert value("loadgen_device_power_watts", labels | {"device": "gpu0", "kind": "gpu"}) == 100
    assert value("loadgen_energy_idle_watts", labels) == pytest.approx(e.idle_w)


def test_energy_off_reads_nothing_and_says_so(fake_host: FakeGpu) -> None:
    result = run_test(settings_from_mapping(QUICK | {"energy": "off"}), SUT)
    assert result.energy is not None and not result.energy.measured
    assert result.energy.reason == 'energy = "off" in the settings'
    assert "nvmlInit" not in sys.modules["pynvml"].calls


@pytest.mark.functional
def test_several_load_processes_are_metered_by_the_parent(fake_host: FakeGpu) -> None:
    result = run_test(settings_from_mapping(QUICK | {"workers": 2}), SUT)
    e = result.energy
    assert e is not None and e.measured and e.idle_w is not None
    assert e.avg_w == pytest.approx(100.0, rel=1e-3)
