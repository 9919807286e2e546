"""Arrival processes: small frozen values with one method, no clock, no global random.

`next_offsets(rng, after_ns, count, planned)` gives the next `count` arrival
offsets (float ns from the run's start) after the `planned` ones already given,
the last of which was at `after_ns` (0.0 before the first). A renewal or
Poisson process continues from `after_ns` alone; a trace continues from
`planned`, and returns fewer than `count` once it runs out.

Time-varying rates (steps, bursts) are exact, by time rescaling: the arrivals
of a unit-rate Poisson process, E_1 < E_2 < ..., are mapped through the inverse
of the cumulative rate, t_i = Lambda^-1(E_i) with Lambda(t) = integral of the
rate from 0 to t. A chunk starts at Lambda(after_ns), which the memoryless
exponential makes exact too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

__all__ = [
    "ArrivalProcess",
    "Burst",
    "Constant",
    "ConstantShare",
    "Gamma",
    "Poisson",
    "Steps",
    "Trace",
]

NS = 1e9
Floats = npt.NDArray[np.float64]


class ArrivalProcess(Protocol):
    """Gives arrival offsets in float ns, ascending, after those already planned."""

    @property
    def peak_qps(self) -> float:
        """The highest rate it asks for (a trace: its busiest second)."""
        ...

    def next_offsets(self, rng: np.random.Generator, after_ns: float, count: int,
                     planned: int = 0) -> Floats:
        """The next `count` offsets (fewer only when a finite process runs out)."""
        ...


@dataclass(frozen=True, slots=True)
class Poisson:
    """Exponential inter-arrivals at `rate_qps` (MLPerf Server)."""

    rate_qps: float

    @property
    def peak_qps(self) -> float:
        return self.rate_qps

    def next_offsets(self, rng: np.random.Generator, after_ns: float, count: int,
                     planned: int = 0) -> Floats:
        return after_ns + np.cumsum(rng.exponential(NS / self.rate_qps, count))


@dataclass(frozen=True, slots=True)
class Constant:
    """A fixed period of 1 / `rate_qps`."""

    rate_qps: float

    @property
    def peak_qps(self) -> float:
        return self.rate_qps

    def next_offsets(self, rng: np.random.Generator, after_ns: float, count: int,
                     planned: int = 0) -> Floats:
        return after_ns + (NS / self.rate_qps) * np.arange(1, count + 1, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class ConstantShare:
    """Load process `index` of `count`'s share of `Constant(rate_qps)`: its arrivals
    index, index + count, index + 2 count, ... (0-based), computed directly."""

    rate_qps: float
    index: int
    count: int

    @property
    def peak_qps(self) -> float:
        return self.rate_qps / self.count

    def next_offsets(self, rng: np.random.Generator, after_ns: float, count: int,
                     planned: int = 0) -> Floats:
        positions = self.index + self.count * (planned + np.arange(count, dtype=np.float64))
        return (NS / self.rate_qps) * (positions + 1.0)


@dataclass(frozen=True, slots=True)
class Gamma:
    """Gamma inter-arrivals of mean 1 / `rate_qps` and shape `shape` (CV = 1/sqrt(shape))."""

    rate_qps: float
    shape: float

    @property
    def peak_qps(self) -> float:
        return self.rate_qps

    def next_offsets(self, rng: np.random.Generator, after_ns: float, count: int,
                     planned: int = 0) -> Floats:
        scale = NS / (self.rate_qps * self.shape)
        return after_ns + np.cumsum(rng.gamma(self.shape, scale, count))


def _unit_arrivals(rng: np.random.Generator, start: float, count: int) -> Floats:
    """Arrival times of a unit-rate Poisson process after `start` (in Lambda units)."""
    return start + np.cumsum(rng.exponential(1.0, count))


def _ascending(t_ns: Floats, after_ns: float) -> Floats:
    """Guard against rounding at segment edges: never before `after_ns`, never backwards."""
    return np.maximum.accumulate(np.maximum(t_ns, after_ns))


def _split(u: Floats, width: float) -> tuple[Floats, Floats]:
    """Whole cycles of `width` in u and the remainder (no cycles when width is 0)."""
    if not width:
        return np.zeros_like(u), u
    k = np.floor(u / width)
    return k, u - k * width


@dataclass(frozen=True, slots=True)
class Steps:
    """Poisson arrivals whose rate follows a step plan: `rates_qps[i]` from `starts_s[i]`.

    With `ramp`, the rate moves linearly from each step's rate to the next's;
    the last rate holds to the end either way. A step may have rate 0 (a pause).
    """

    starts_s: tuple[float, ...]
    rates_qps: tuple[float, ...]
    ramp: bool = False

    @property
    def peak_qps(self) -> float:
        return max(self.rates_qps)

    def _knots(self) -> tuple[Floats, Floats, Floats, Floats]:
        """Per segment: start (ns), rate at start and slope (per ns), Lambda at start."""
        t = np.asarray(self.starts_s, dtype=np.float64) * NS
        r = np.asarray(self.rates_qps, dtype=np.float64) / NS
        width = np.diff(t)
        slope = np.zeros_like(r)
        if self.ramp:
            slope[:-1] = np.diff(r) / width
        area = r[:-1] * width + 0.5 * slope[:-1] * width**2
        return t, r, slope, np.concatenate([[0.0], np.cumsum(area)])

    def cumulative(self, t_ns: Floats) -> Floats:
        """Lambda(t): the expected number of arrivals in [0, t)."""
        t, r, slope, lam = self._knots()
        i = np.clip(np.searchsorted(t, t_ns, side="right") - 1, 0, None)
        tau = t_ns - t[i]
        return lam[i] + r[i] * tau + 0.5 * slope[i] * tau**2

    def mean_qps(self, start_s: float, end_s: float) -> float:
        """The planned mean rate between two times (seconds from the run's start)."""
        lam = self.cumulative(np.array([start_s, end_s]) * NS)
        return float(lam[1] - lam[0]) / (end_s - start_s)

    def next_offsets(self, rng: np.random.Generator, after_ns: float, count: int,
                     planned: int = 0) -> Floats:
        t, r, slope, lam = self._knots()
        x = _unit_arrivals(rng, self.cumulative(np.array([after_ns]))[0], count)
        i = np.searchsorted(lam, x, side="right") - 1  # a zero-rate segment is skipped
        y = x - lam[i]
        # solve r tau + slope tau^2 / 2 = y; this form is stable for slope 0 and r 0
        root = np.sqrt(np.maximum(r[i] ** 2 + 2.0 * slope[i] * y, 0.0))
        tau = np.divide(2.0 * y, r[i] + root, out=np.zeros_like(y), where=y > 0)
        return _ascending(t[i] + tau, after_ns)


@dataclass(frozen=True, slots=True)
class Burst:
    """Poisson arrivals at `rate_qps`, times `factor` during bursts of `duration_s`.

    The first burst begins at `start_s`; with `period_s` they repeat that
    often, else there is one.
    """

    rate_qps: float
    factor: float
    start_s: float
    duration_s: float
    period_s: float = 0.0

    @property
    def peak_qps(self) -> float:
        return self.rate_qps * max(self.factor, 1.0)

    def _cycle(self) -> tuple[float, float, float, float, float, float]:
        """Per ns: base and burst rates; in ns: first start, burst length, period (0 if
        one burst); and the expected arrivals in one whole period (0 if one burst)."""
        base, high = self.rate_qps / NS, self.rate_qps * self.factor / NS
        length, period = self.duration_s * NS, self.period_s * NS
        area = high * length + base * (period - length) if period else 0.0
        return base, high, self.start_s * NS, length, period, area

    def cumulative(self, t_ns: Floats) -> Floats:
        """Lambda(t): the expected number of arrivals in [0, t)."""
        base, high, start, length, period, area = self._cycle()
        k, r = _split(np.maximum(t_ns - start, 0.0), period)
        inside = np.where(r < length, high * r, high * length + base * (r - length))
        return base * np.minimum(t_ns, start) + k * area + inside

    def next_offsets(self, rng: np.random.Generator, after_ns: float, count: int,
                     planned: int = 0) -> Floats:
        base, high, start, length, period, area = self._cycle()
        x = _unit_arrivals(rng, self.cumulative(np.array([after_ns]))[0], count)
        lead = base * start
        k, z = _split(np.maximum(x - lead, 0.0), area)
        r = np.where(z < high * length, z / high, length + (z - high * length) / base)
        return _ascending(np.where(x < lead, x / base, start + k * period + r), after_ns)


@dataclass(frozen=True, slots=True)
class Trace:
    """Recorded arrivals: `offsets_ns` (int64, ascending) replayed as they are."""

    source: str
    sha256: str
    offsets_ns: npt.NDArray[np.int64] = field(repr=False, compare=False)

    @property
    def peak_qps(self) -> float:
        """Most arrivals in any one-second window."""
        off = self.offsets_ns
        if off.size == 0:
            return 0.0
        ends = np.searchsorted(off, off + int(NS), side="left")
        return float((ends - np.arange(off.size)).max())

    def next_offsets(self, rng: np.random.Generator, after_ns: float, count: int,
                     planned: int = 0) -> Floats:
        return self.offsets_ns[planned : planned + count].astype(np.float64)
