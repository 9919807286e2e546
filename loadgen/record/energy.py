"""The energy sampler: a thread reading every device at a set rate, off the issue path.

`open_meter` finds the sources a run's settings allow (GPUs through NVML, CPU
packages through powercap) and says why any are missing. The run session then calls
`idle()` once the SUT is up and before the clock starts (the idle baseline, taken
in the calling thread for `energy_idle_s`), `start()` just before the engine runs
(the sampler thread), and `stop()` when it has ended, which returns the `EnergyTrace`:
every reading stamped on the engine's clock (`perf_counter_ns`), so the judge can cut
it to the measured window afterwards. With no readable device nothing is sampled and
no thread starts. The thread only reads counters and appends a row; pacing is a wait
on the stop event, so `stop()` ends it at once.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np
import numpy.typing as npt

from loadgen.plan.settings import ENERGY
from loadgen.record.devices import FIELDS, Device, Source, Unmeasured
from loadgen.record.nvml import open_gpus
from loadgen.record.powercap import POWERCAP_ROOT, open_packages

__all__ = ["EnergyMeter", "EnergyTrace", "open_meter"]

Floats = npt.NDArray[np.float64]
Row = tuple[int, tuple[tuple[float, ...], ...]]
"""One reading: its stamp (perf_counter ns) and a row of `FIELDS` per device."""


@dataclass(frozen=True, slots=True)
class EnergyTrace:
    """A run's readings: `values[i, d, f]` is device d's field f (`FIELDS`) at `t_ns[i]`."""

    devices: tuple[Device, ...]
    unmeasured: tuple[Unmeasured, ...]
    sample_hz: float
    t_ns: npt.NDArray[np.int64]
    values: Floats
    idle_t_ns: npt.NDArray[np.int64] = field(
        default_factory=lambda: np.zeros(0, dtype=np.int64))
    idle_values: Floats = field(default_factory=lambda: np.zeros((0, 0, len(FIELDS))))
    host: str = field(default_factory=socket.gethostname)  # where the devices were read


def _as_arrays(rows: list[Row], devices: int) -> tuple[npt.NDArray[np.int64], Floats]:
    t = np.array([r[0] for r in rows], dtype=np.int64)
    values = np.array([r[1] for r in rows], dtype=np.float64).reshape(
        len(rows), devices, len(FIELDS))
    return t, values


class EnergyMeter:
    """Samples `sources` at `sample_hz`: an idle baseline, then a thread over the run."""

    def __init__(self, sources: Sequence[Source], sample_hz: float, idle_s: float,
                 unmeasured: Sequence[Unmeasured] = (),
                 closers: Sequence[Callable[[], None]] = ()) -> None:
        if sample_hz <= 0:
            raise ValueError(f"sample_hz must be above 0, got {sample_hz!r}")
        self.sources = tuple(sources)
        self.sample_hz = sample_hz
        self.idle_s = idle_s
        self.unmeasured = tuple(unmeasured)
        self._closers = tuple(closers)
        self._clock = time.perf_counter_ns  # the engine's clock
        self._period_ns = round(1e9 / sample_hz)
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._idle: list[Row] = []
        self._rows: list[Row] = []
        self._closed = False

    @property
    def devices(self) -> tuple[Device, ...]:
        """The devices inside the boundary."""
        return tuple(s.device for s in self.sources)

    def latest(self) -> tuple[tuple[Device, tuple[float, ...]], ...]:
        """The last reading of each device (empty before the first); any thread may call."""
        rows = self._rows
        if not rows:
            return ()
        return tuple(zip(self.devices, rows[-1][1], strict=True))

    def _sample(self) -> Row:
        """One reading of every source, stamped halfway through reading them."""
        before = self._clock()
        readings = tuple(s.read() for s in self.sources)
        return (before + self._clock()) // 2, readings

    def _pace(self, rows: list[Row], until_ns: int | None) -> None:
        """After the reading just taken, one every period until the stop event, or until
        `until_ns` with a last one then."""
        due = rows[-1][0]
        while True:
            due += self._period_ns
            now = self._clock()
            if until_ns is not None and due > until_ns:
                if until_ns > now:
                    self._halt.wait((until_ns - now) / 1e9)
                rows.append(self._sample())  # the last one closes the span
                return
            due = max(due, now)  # fell behind (a slow read): skip, never burst
            if self._halt.wait((due - now) / 1e9):
                return
            rows.append(self._sample())

    def idle(self) -> None:
        """Take the idle baseline: `idle_s` of readings in this thread (none without sources)."""
        if self.sources and self.idle_s > 0:
            until = self._clock() + round(self.idle_s * 1e9)
            self._idle.append(self._sample())
            self._pace(self._idle, until)

    def start(self) -> None:
        """Take a first reading now, in this thread (so the span starts before the run's
        clock does), then start the sampler thread (none without sources)."""
        if not self.sources or self._thread is not None:
            return
        self._rows.append(self._sample())
        self._thread = threading.Thread(target=self._pace, args=(self._rows, None),
                                        name="loadgen-energy", daemon=True)
        self._thread.start()

    def stop(self) -> EnergyTrace:
        """Stop sampling (one last reading closes the span), release the devices, and
        return everything read."""
        if self._thread is not None:
            self._halt.set()
            self._thread.join()
            self._thread = None
            self._rows.append(self._sample())
        self.close()
        n = len(self.sources)
        t, values = _as_arrays(self._rows, n)
        idle_t, idle_values = _as_arrays(self._idle, n)
        return EnergyTrace(self.devices, self.unmeasured, self.sample_hz, t, values,
                           idle_t, idle_values)

    def close(self) -> None:
        """Release every source and NVML (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for source in self.sources:
            source.close()
        for closer in self._closers:
            closer()


def open_meter(mode: str, sample_hz: float, idle_s: float, *, nvml: ModuleType | None = None,
               powercap_root: Path | None = None) -> EnergyMeter | None:
    """The meter a run's `energy` setting asks for: None when "off"; with "auto", every
    readable GPU and CPU package (possibly none: the meter then records why).

    `nvml` stands in for `pynvml` and `powercap_root` for /sys/class/powercap (tests).
    """
    if mode == "off":
        return None
    if mode not in ENERGY:
        raise ValueError(f"energy must be one of {', '.join(ENERGY)}, got {mode!r}")
    gpus, gpus_missing, shutdown = open_gpus(nvml)
    packages, packages_missing = open_packages(powercap_root or POWERCAP_ROOT)
    sources: list[Source] = [*gpus, *packages]
    return EnergyMeter(sources, sample_hz, idle_s, [*gpus_missing, *packages_missing],
                       [shutdown])
