"""The energy block in the summary and the report: measured, not measured, and absent."""

from __future__ import annotations

from loadgen.judge.energy import DeviceEnergy, EnergyFigures
from loadgen.record.devices import Unmeasured
from loadgen.report.energy import energy_html, energy_lines

MEASURED = EnergyFigures(
    measured=True, host="gpu-box",
    devices=(DeviceEnergy("gpu0", "gpu", "NVIDIA <H100>", "nvml_energy_counter", 700.0, 350.0,
                          400.0, 70.0, 93.5, float(40 << 30), 1980.0, 2619.0, 61.0),),
    unmeasured=(Unmeasured("cpu", "/sys/class/powercap does not exist"),),
    method="nvml_energy_counter", sample_hz=10.0, samples=21, window_s=2.0, idle_w=70.0,
    avg_w=350.0, peak_w=400.0, joules=700.0, active_joules=560.0, joules_per_query=0.07,
    joules_per_sample=0.07, qps_per_watt=14.3, samples_per_s_per_watt=14.3)


def test_the_summary_gives_the_figures_the_boundary_and_what_was_not_read() -> None:
    lines = energy_lines(MEASURED)
    assert lines[0].startswith("Energy    : 700.00 J over 2.00 s, avg 350.0 W, peak 400.0 W, "
                               "idle 70.0 W; 0.07 J/query, 14.3 QPS/W, 14.3 samples/s/W")
    assert "tokens/J" not in lines[0]
    assert lines[1] == ("  boundary: gpu0 (NVIDIA <H100>) on gpu-box; nvml_energy_counter at "
                        "10 Hz, 21 readings")
    assert lines[2] == "  not read: cpu: /sys/class/powercap does not exist"


def test_not_measured_says_why_and_an_old_result_says_nothing() -> None:
    assert energy_lines(EnergyFigures.not_measured("no device")) == [
        "Energy    : not measured: no device"]
    assert energy_lines(None) == [] and energy_html(None) == ""
    assert energy_html(EnergyFigures.not_measured("a <b> c")) == (
        "<h2>Energy</h2><p>Not measured: a &lt;b&gt; c</p>")


def test_the_report_has_a_row_per_device_escaped_with_memory_in_mib() -> None:
    page = energy_html(MEASURED)
    assert page.startswith("<h2>Energy</h2><table>")
    assert "NVIDIA &lt;H100&gt;" in page and "<td>40960</td>" in page
    assert "Not read: cpu: /sys/class/powercap does not exist" in page
    assert page.count("<tr>") == 4  # figures head and row, devices head and one device
