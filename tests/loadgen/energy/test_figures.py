"""Energy over the window from hand-made traces: counter differences, power integrals, idle."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from loadgen.judge.energy import EnergyFigures, energy_figures, output_tokens_of
from loadgen.judge.tokenstats import TokenStats
from loadgen.record.devices import FIELDS, Device, Unmeasured
from loadgen.record.energy import EnergyTrace

DATA = Path(__file__).parents[2] / "data" / "records"

S = 1_000_000_000
P, E = FIELDS.index("power_w"), FIELDS.index("energy_j")
GPU = Device("gpu0", "gpu", "fake", "nvml_energy_counter")
GPU_POWER_ONLY = Device("gpu1", "gpu", "fake", "nvml_power")
CPU = Device("cpu-package-0", "cpu", "package-0", "rapl_energy_counter")
CONTRACT = {"measured", "reason", "devices", "method", "sample_hz", "idle_w", "avg_w", "peak_w",
            "joules", "joules_per_query", "qps_per_watt"}


def trace(devices: tuple[Device, ...], t_s: list[float], columns: list[dict[int, list[float]]],
          idle_t_s: list[float] | None = None,
          idle_columns: list[dict[int, list[float]]] | None = None) -> EnergyTrace:
    """A trace from per-device {field index: values} at times in seconds."""
    def block(times: list[float], cols: list[dict[int, list[float]]]) -> np.ndarray:
        values = np.full((len(times), len(devices), len(FIELDS)), np.nan)
        for d, col in enumerate(cols):
            for f, series in col.items():
                values[:, d, f] = series
        return values

    idle_t_s = idle_t_s or []
    return EnergyTrace(devices, (), 10.0, (np.array(t_s) * S).astype(np.int64),
                       block(t_s, columns), (np.array(idle_t_s) * S).astype(np.int64),
                       block(idle_t_s, idle_columns or [{} for _ in devices]))


def figures(tr: EnergyTrace, start_s: float, end_s: float, **counts: float) -> EnergyFigures:
    kw = {"queries": 300, "samples": 600, "qps": 200.0, "samples_per_s": 400.0} | counts
    return energy_figures(tr, round(start_s * S), round(end_s * S), **kw)  # type: ignore[arg-type]


def test_counter_difference_interpolated_at_the_window_ends() -> None:
    t = [0.0, 0.5, 1.0, 1.5, 2.0]
    tr = trace((GPU,), t, [{E: [1000 + 50 * x for x in t], P: [50.0] * 5}])
    f = figures(tr, 0.25, 1.75)
    assert f.measured and f.reason is None
    assert f.joules == pytest.approx(75.0)  # 50 W over 1.5 s, ends between readings
    assert f.avg_w == pytest.approx(50.0) and f.window_s == pytest.approx(1.5)
    assert f.samples == 3  # 0.5, 1.0, 1.5 fall inside
    assert f.joules_per_query == pytest.approx(0.25)
    assert f.joules_per_sample == pytest.approx(0.125)
    assert f.qps_per_watt == pytest.approx(4.0) and f.samples_per_s_per_watt == pytest.approx(8.0)
    assert f.method == "nvml_energy_counter"
    assert f.idle_w is None and f.active_joules is None  # no baseline taken: unknown, not 0


def test_power_integral_is_the_trapezoid_with_interpolated_edges() -> None:
    t = [0.0, 1.0, 2.0, 3.0]
    tr = trace((GPU_POWER_ONLY,), t, [{P: [100.0, 200.0, 200.0, 100.0]}])
    f = figures(tr, 0.5, 2.5)
    # edges: 150 W at 0.5 s and 150 W at 2.5 s; trapezoids 0.5*(150+200)/2 + 200 + 0.5*(200+150)/2
    assert f.joules == pytest.approx(375.0)
    assert f.peak_w == pytest.approx(200.0)
    assert f.method == "nvml_power"


def test_idle_baseline_is_subtracted_into_active_joules() -> None:
    t = [0.0, 1.0, 2.0]
    idle_t = [-3.0, -2.0, -1.0]
    tr = trace((GPU, CPU), t,
               [{E: [0.0, 300.0, 600.0], P: [300.0] * 3}, {E: [0.0, 40.0, 80.0]}],
               idle_t, [{E: [0.0, 60.0, 120.0], P: [61.0] * 3}, {E: [0.0, 10.0, 20.0]}])
    f = figures(tr, 0.0, 2.0)
    gpu, cpu = f.devices
    assert gpu.idle_w == pytest.approx(60.0)  # the counter's rise, not the power reading
    assert cpu.idle_w == pytest.approx(10.0)
    assert f.idle_w == pytest.approx(70.0)
    assert f.joules == pytest.approx(680.0)
    assert f.active_joules == pytest.approx(680.0 - 70.0 * 2)
    assert f.method == "nvml_energy_counter+rapl_energy_counter"


def test_peak_sums_devices_at_one_instant_a_counter_only_device_by_its_rise() -> None:
    t = [0.0, 1.0, 2.0, 3.0]
    tr = trace((GPU, CPU), t, [{E: [0.0, 100.0, 400.0, 500.0], P: [100.0, 100.0, 300.0, 100.0]},
                               {E: [0.0, 20.0, 40.0, 100.0]}])
    f = figures(tr, 0.0, 3.0)
    assert f.devices[1].peak_w == pytest.approx(60.0)  # 60 J between 2 s and 3 s
    assert f.peak_w == pytest.approx(320.0)  # 300 W + 20 W at t = 2 s


def test_gpu_state_figures_come_from_the_window_only() -> None:
    t = [0.0, 1.0, 2.0, 3.0]
    cols = {E: [0.0, 1.0, 2.0, 3.0], FIELDS.index("util_pct"): [0.0, 50.0, 70.0, 100.0],
            FIELDS.index("memory_used_bytes"): [1.0, 5.0, 3.0, 9.0],
            FIELDS.index("temp_c"): [30.0, 60.0, 50.0, 90.0],
            FIELDS.index("sm_clock_mhz"): [300.0, 1900.0, 2000.0, 300.0]}
    d = figures(trace((GPU,), t, [cols]), 0.5, 2.5).devices[0]
    assert (d.util_pct_avg, d.memory_used_peak_bytes, d.temp_c_max, d.sm_clock_mhz_avg) == (
        60.0, 5.0, 60.0, 1950.0)
    cpu = figures(trace((CPU,), t, [{E: [0.0, 1.0, 2.0, 3.0]}]), 0.5, 2.5).devices[0]
    assert cpu.util_pct_avg is None and cpu.temp_c_max is None


def test_tokens_per_joule_for_token_runs_only() -> None:
    tr = trace((GPU,), [0.0, 1.0, 2.0], [{E: [0.0, 100.0, 200.0]}])
    assert figures(tr, 0.0, 2.0).tokens_per_joule is None
    f = figures(tr, 0.0, 2.0, output_tokens=5000)
    assert f.output_tokens == 5000 and f.tokens_per_joule == pytest.approx(25.0)
    doc = json.loads((DATA / "token_workers_result.json").read_text())
    token_stats = TokenStats.from_dict(doc)
    assert token_stats is not None
    assert output_tokens_of(token_stats) == doc["tokens"]["output_total"] > 0
    assert output_tokens_of(None) is None


def test_no_queries_leave_per_query_figures_unknown_not_zero() -> None:
    tr = trace((GPU,), [0.0, 1.0, 2.0], [{E: [0.0, 100.0, 200.0]}])
    f = figures(tr, 0.0, 2.0, queries=0, samples=0, qps=0.0, samples_per_s=0.0)
    assert f.joules == pytest.approx(200.0)
    assert f.joules_per_query is None and f.joules_per_sample is None


@pytest.mark.parametrize("t, start, end, said", [
    ([0.0, 1.0], 0.2, 0.8, "only 0 reading(s) fell in the 0.600 s measured window at 10 Hz"),
    ([0.0, 1.0], 0.0, 0.0, "the measured window is empty"),
    ([0.5, 1.0, 1.5], 0.0, 1.5, "the readings do not cover the measured window"),
])
def test_too_little_to_go_on_says_why(t: list[float], start: float, end: float,
                                      said: str) -> None:
    tr = trace((GPU,), t, [{E: [float(i) for i in range(len(t))]}])
    f = figures(tr, start, end)
    assert not f.measured and f.reason is not None and said in f.reason
    assert f.joules is None and f.avg_w is None


def test_nothing_readable_lists_every_source_and_its_reason() -> None:
    missing = (Unmeasured("gpu", "nvidia-ml-py is not installed"),
               Unmeasured("cpu", "/sys/class/powercap does not exist"))
    empty = EnergyTrace((), missing, 10.0, np.zeros(0, np.int64), np.zeros((0, 0, len(FIELDS))))
    f = figures(empty, 0.0, 1.0)
    assert not f.measured
    assert f.reason == ("nothing could be measured (gpu: nvidia-ml-py is not installed; "
                        "cpu: /sys/class/powercap does not exist)")
    doc = f.as_dict()
    assert CONTRACT <= set(doc)
    assert doc["unmeasured"][0] == {"source": "gpu", "reason": "nvidia-ml-py is not installed"}
    assert all(doc[k] is None for k in ("joules", "avg_w", "peak_w", "idle_w", "qps_per_watt"))


def test_the_block_reads_back_as_written() -> None:
    tr = trace((GPU, CPU), [0.0, 1.0, 2.0], [{E: [0.0, 1.0, 2.0], P: [1.0] * 3},
                                             {E: [0.0, 2.0, 4.0]}], [-1.0, 0.0],
               [{E: [0.0, 1.0]}, {E: [0.0, 1.0]}])
    f = figures(tr, 0.0, 2.0)
    doc = f.as_dict()
    assert CONTRACT <= set(doc) and doc["measured"] is True
    assert EnergyFigures.from_dict(doc) == f
    assert not any(isinstance(v, float) and math.isnan(v) for v in doc.values())
