"""Energy over the measured window: joules, watts, and per query, sample and token.

Pure: (trace, window, counts) -> `EnergyFigures`, the `energy` block of result.json.
The window is the performance figures' own (`stats.measured_window_ns`). Per device,
joules are the energy counter's difference between the window's ends (each end
interpolated linearly between the readings around it) where the device has a counter,
else the trapezoid integral of its sampled power over the window. Watts: `avg_w` is
joules over the window's length, `peak_w` the highest total of the devices' readings at
one sampling instant (a device without a power reading counts its counter's rise since
the reading before), `idle_w` the same devices before the run (counter rise over the
idle span, else mean power). `active_joules` subtracts idle power times the window.
Unknowns are None, never zero; when nothing could be measured, `reason` says why.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.judge.tokenstats import TokenStats
from loadgen.record.devices import FIELDS, Device, Unmeasured
from loadgen.record.energy import EnergyTrace

__all__ = ["DeviceEnergy", "EnergyFigures", "energy_figures", "output_tokens_of"]

Floats = npt.NDArray[np.float64]
_P, _E = FIELDS.index("power_w"), FIELDS.index("energy_j")
_U, _M = FIELDS.index("util_pct"), FIELDS.index("memory_used_bytes")
_SM, _MC, _T = (FIELDS.index(f) for f in ("sm_clock_mhz", "mem_clock_mhz", "temp_c"))
MIN_READINGS = 2


def _opt(value: float | None, digits: int = 6) -> float | None:
    """A finite value rounded for the record, else None."""
    if value is None or not math.isfinite(value):
        return None
    return round(float(value), digits)


@dataclass(frozen=True, slots=True)
class DeviceEnergy:
    """One device's figures over the window (GPU state figures are None for a CPU)."""

    name: str
    kind: str
    model: str
    method: str
    joules: float | None
    avg_w: float | None
    peak_w: float | None
    idle_w: float | None
    util_pct_avg: float | None = None
    memory_used_peak_bytes: float | None = None
    sm_clock_mhz_avg: float | None = None
    mem_clock_mhz_avg: float | None = None
    temp_c_max: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain values, as in result.json."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class EnergyFigures:
    """result.json's `energy` block; see the module docstring and README."""

    measured: bool
    reason: str | None = None
    host: str | None = None  # where the devices were read: the load generator's host
    devices: tuple[DeviceEnergy, ...] = ()
    unmeasured: tuple[Unmeasured, ...] = ()
    method: str | None = None
    sample_hz: float | None = None
    samples: int | None = None
    window_s: float | None = None
    idle_w: float | None = None
    avg_w: float | None = None
    peak_w: float | None = None
    joules: float | None = None
    active_joules: float | None = None
    joules_per_query: float | None = None
    joules_per_sample: float | None = None
    qps_per_watt: float | None = None
    samples_per_s_per_watt: float | None = None
    output_tokens: int | None = None
    tokens_per_joule: float | None = None

    @classmethod
    def not_measured(cls, reason: str, trace: EnergyTrace | None = None) -> EnergyFigures:
        """A block that says nothing was measured, and why (with what the trace tells)."""
        if trace is None:
            return cls(False, reason)
        return cls(False, reason, trace.host, unmeasured=trace.unmeasured,
                   sample_hz=trace.sample_hz if trace.devices else None)

    def as_dict(self) -> dict[str, Any]:
        """Plain values, as in result.json."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["devices"] = [d.as_dict() for d in self.devices]
        out["unmeasured"] = [u.as_dict() for u in self.unmeasured]
        return out

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> EnergyFigures:
        """Read back `as_dict` (keys it does not know are ignored)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"devices", "unmeasured"}
        device_names = {f.name for f in dataclasses.fields(DeviceEnergy)}
        return cls(
            **{k: v for k, v in doc.items() if k in names},
            devices=tuple(DeviceEnergy(**{k: v for k, v in d.items() if k in device_names})
                          for d in doc.get("devices") or ()),
            unmeasured=tuple(Unmeasured(str(u["source"]), str(u["reason"]))
                             for u in doc.get("unmeasured") or ()),
        )


def output_tokens_of(token_stats: TokenStats | None) -> int | None:
    """The output token count of a token run's figures (`tokens.output_total`), else None."""
    return None if token_stats is None else token_stats.tokens.output_total


def _at(t: Floats, y: Floats, x: float) -> float:
    return float(np.interp(x, t, y))


def _integral(t: Floats, p: Floats, a: float, b: float) -> float:
    """Trapezoid integral of power over [a, b], in J (t in s)."""
    inside = (t > a) & (t < b)
    ts = np.concatenate(([a], t[inside], [b]))
    ps = np.concatenate(([_at(t, p, a)], p[inside], [_at(t, p, b)]))
    return float(np.sum((ps[1:] + ps[:-1]) * np.diff(ts)) / 2)


def _rises(t: Floats, e: Floats) -> Floats:
    """Power from a counter: each reading's rise since the one before over the gap (NaN
    for the first)."""
    out = np.full(t.size, np.nan)
    if t.size > 1:
        out[1:] = np.diff(e) / np.maximum(np.diff(t), 1e-9)
    return out


def _power_series(t: Floats, column: Floats, counter: Floats) -> Floats:
    """Power at each reading: the device's own where it reports one, else its counter's."""
    return np.where(np.isnan(column), _rises(t, counter), column)


def _idle_w(t: Floats, rows: Floats, device: Device) -> float | None:
    if t.size < MIN_READINGS:
        return None
    e, p = rows[:, _E], rows[:, _P]
    if device.counter and not np.isnan(e[[0, -1]]).any() and t[-1] > t[0]:
        return float((e[-1] - e[0]) / (t[-1] - t[0]))
    return float(np.nanmean(p)) if not np.isnan(p).all() else None


def _stat(values: Floats, how: str) -> float | None:
    if values.size == 0 or np.isnan(values).all():
        return None
    return float(np.nanmax(values) if how == "max" else np.nanmean(values))


def _device(trace: EnergyTrace, d: int, t: Floats, a: float, b: float,
            in_window: npt.NDArray[np.bool_]) -> tuple[DeviceEnergy, Floats]:
    """One device's figures, and its power at each reading in the window."""
    device = trace.devices[d]
    rows = trace.values[:, d, :]
    e, p = rows[:, _E], rows[:, _P]
    joules = None
    if device.counter:
        ok = ~np.isnan(e)
        if ok.sum() >= MIN_READINGS:
            joules = _at(t[ok], e[ok], b) - _at(t[ok], e[ok], a)
    else:
        ok = ~np.isnan(p)
        if ok.sum() >= MIN_READINGS:
            joules = _integral(t[ok], p[ok], a, b)
    power = _power_series(t, p, e)[in_window]
    idle_t = (trace.idle_t_ns - trace.idle_t_ns[:1]).astype(np.float64) / 1e9
    gpu = device.kind == "gpu"
    window = rows[in_window]
    figures = DeviceEnergy(
        device.name, device.kind, device.model, device.method,
        _opt(joules), _opt(None if joules is None else joules / (b - a)),
        _opt(_stat(power, "max")),
        _opt(_idle_w(idle_t, trace.idle_values[:, d, :], device)
             if trace.idle_values.size else None),
        _opt(_stat(window[:, _U], "mean")) if gpu else None,
        _opt(_stat(window[:, _M], "max"), 0) if gpu else None,
        _opt(_stat(window[:, _SM], "mean")) if gpu else None,
        _opt(_stat(window[:, _MC], "mean")) if gpu else None,
        _opt(_stat(window[:, _T], "max")) if gpu else None)
    return figures, power


def _sum(values: list[float | None]) -> float | None:
    return None if not values or any(v is None for v in values) else sum(
        v for v in values if v is not None)


def _per(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return _opt(numerator / denominator, 9)


def energy_figures(trace: EnergyTrace, start_ns: int, end_ns: int, *, queries: int,
                   samples: int, qps: float, samples_per_s: float,
                   output_tokens: int | None = None) -> EnergyFigures:
    """The energy block of a run measured over [start_ns, end_ns] (perf_counter ns)."""
    missing = trace.unmeasured
    if not trace.devices:
        said = "; ".join(f"{u.source}: {u.reason}" for u in missing) or "no device to read"
        return EnergyFigures.not_measured(f"nothing could be measured ({said})", trace)
    hz = trace.sample_hz
    if end_ns <= start_ns:
        return EnergyFigures.not_measured("the measured window is empty (no query completed "
                                          "in it)", trace)
    origin = start_ns
    t = (trace.t_ns - origin).astype(np.float64) / 1e9
    a, b = 0.0, (end_ns - origin) / 1e9
    in_window = (t >= a) & (t <= b)
    readings = int(in_window.sum())
    if t.size == 0 or t[0] > a or t[-1] < b:
        return EnergyFigures.not_measured("the readings do not cover the measured window "
                                          "(the sampler started late or stopped early)", trace)
    if readings < MIN_READINGS:
        return EnergyFigures.not_measured(
            f"only {readings} reading(s) fell in the {b:.3f} s measured window at {hz:g} Hz: "
            "run longer or raise energy_sample_hz", trace)
    per_device = [_device(trace, d, t, a, b, in_window) for d in range(len(trace.devices))]
    devices = tuple(f for f, _ in per_device)
    joules = _sum([d.joules for d in devices])
    if joules is None:
        return EnergyFigures.not_measured("a device gave too few readings to integrate",
                                          trace)
    total_power = np.nansum(np.stack([p for _, p in per_device]), axis=0)
    idle_w = _sum([d.idle_w for d in devices])
    avg_w = joules / b
    return EnergyFigures(
        measured=True, host=trace.host, devices=devices, unmeasured=missing,
        method="+".join(sorted({d.method for d in devices})),
        sample_hz=hz, samples=readings, window_s=_opt(b),
        idle_w=_opt(idle_w), avg_w=_opt(avg_w), peak_w=_opt(float(total_power.max())),
        joules=_opt(joules),
        active_joules=_opt(None if idle_w is None else joules - idle_w * b),
        joules_per_query=_per(joules, queries), joules_per_sample=_per(joules, samples),
        qps_per_watt=_per(qps, avg_w), samples_per_s_per_watt=_per(samples_per_s, avg_w),
        output_tokens=output_tokens,
        tokens_per_joule=None if output_tokens is None else _per(output_tokens, joules))
