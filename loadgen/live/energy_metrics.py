"""Prometheus gauges of energy: each device's latest reading live, the run's figures at the end.

Live, from the energy meter's last reading (labels scenario, sut, run_id, device, kind;
a figure the device does not report is left out):

    loadgen_device_power_watts, loadgen_device_energy_joules (the device's counter),
    loadgen_device_utilization_ratio, loadgen_device_memory_used_bytes,
    loadgen_device_sm_clock_hertz, loadgen_device_temperature_celsius

Once the run has ended, from result.json's `energy` block (labels scenario, sut, run_id;
unknown figures are left out, never zero): loadgen_energy_measured (1 or 0),
loadgen_energy_joules, loadgen_energy_average_watts, loadgen_energy_peak_watts,
loadgen_energy_idle_watts, loadgen_energy_joules_per_query,
loadgen_energy_queries_per_second_per_watt.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

from loadgen.judge.energy import EnergyFigures
from loadgen.record.devices import FIELDS, Device

__all__ = ["device_gauges", "energy_gauges"]

_DEVICE = (  # exported name, reading field, scale, help
    ("loadgen_device_power_watts", "power_w", 1.0, "Device power, its latest reading."),
    ("loadgen_device_energy_joules", "energy_j", 1.0,
     "Device energy counter, its latest reading (since it was opened or the driver loaded)."),
    ("loadgen_device_utilization_ratio", "util_pct", 0.01, "GPU busy share (NVML)."),
    ("loadgen_device_memory_used_bytes", "memory_used_bytes", 1.0, "GPU memory used (NVML)."),
    ("loadgen_device_sm_clock_hertz", "sm_clock_mhz", 1e6, "GPU SM clock (NVML)."),
    ("loadgen_device_temperature_celsius", "temp_c", 1.0, "GPU temperature (NVML)."),
)
_RUN = (  # exported name, EnergyFigures attribute, help
    ("loadgen_energy_joules", "joules", "Energy over the measured window."),
    ("loadgen_energy_average_watts", "avg_w", "Mean power over the measured window."),
    ("loadgen_energy_peak_watts", "peak_w", "Highest total power read in the window."),
    ("loadgen_energy_idle_watts", "idle_w", "Total power of the same devices before the run."),
    ("loadgen_energy_joules_per_query", "joules_per_query", "Joules per measured query."),
    ("loadgen_energy_queries_per_second_per_watt", "qps_per_watt",
     "Completed queries per second per watt."),
)


def device_gauges(label_names: Sequence[str], labels: Sequence[str],
                  latest: Sequence[tuple[Device, tuple[float, ...]]]) -> Iterator[Metric]:
    """One family per reading field, a sample per device that reports it."""
    for name, field, scale, doc in _DEVICE:
        family = GaugeMetricFamily(name, doc, labels=(*label_names, "device", "kind"))
        index = FIELDS.index(field)
        for device, row in latest:
            if not math.isnan(row[index]):
                family.add_metric([*labels, device.name, device.kind], row[index] * scale)
        if family.samples:
            yield family


def energy_gauges(label_names: Sequence[str], labels: Sequence[str],
                  figures: EnergyFigures) -> Iterator[Metric]:
    """The run's energy figures, each known one as a gauge."""
    measured = GaugeMetricFamily("loadgen_energy_measured",
                                 "1 if the run's energy was measured, else 0.",
                                 labels=label_names)
    measured.add_metric(list(labels), 1.0 if figures.measured else 0.0)
    yield measured
    for name, attr, doc in _RUN:
        value = getattr(figures, attr)
        if value is not None:
            family = GaugeMetricFamily(name, doc, labels=label_names)
            family.add_metric(list(labels), float(value))
            yield family
