"""What an energy source is: a device, the figures one reading holds, and why one is missing.

A `Source` reads one device (a GPU through NVML, a CPU package through powercap)
and returns one row of `FIELDS`, NaN where the device does not report a figure.
`energy_j` is a cumulative counter in joules, made monotonic by the source (wrap-around
handled); `power_w` is the device's own power reading. The sampler (`record.energy`)
only calls `read`; it never knows which kind of device it holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["FIELDS", "NAN_ROW", "Device", "Source", "Unmeasured"]

FIELDS = ("power_w", "energy_j", "util_pct", "memory_used_bytes", "sm_clock_mhz",
          "mem_clock_mhz", "temp_c")
"""The columns of one reading, in order."""
NAN_ROW: tuple[float, ...] = (float("nan"),) * len(FIELDS)


@dataclass(frozen=True, slots=True)
class Device:
    """One device inside the measurement boundary."""

    name: str  # "gpu0", "cpu-package-0"
    kind: str  # "gpu" or "cpu"
    model: str  # what the device calls itself ("NVIDIA H100 80GB HBM3", "package-0")
    method: str  # "nvml_energy_counter", "nvml_power", or "rapl_energy_counter"

    @property
    def counter(self) -> bool:
        """Whether joules come from an energy counter (else from integrating power)."""
        return self.method.endswith("energy_counter")


@dataclass(frozen=True, slots=True)
class Unmeasured:
    """A source that was looked for and could not be read, and why."""

    source: str  # "gpu", "gpu1", "cpu"
    reason: str

    def as_dict(self) -> dict[str, str]:
        """{"source": ..., "reason": ...}."""
        return {"source": self.source, "reason": self.reason}


class Source(Protocol):
    """One readable device."""

    @property
    def device(self) -> Device:
        """What this source reads."""

    def read(self) -> tuple[float, ...]:
        """One reading: a value per `FIELDS` entry, NaN where unknown; never raises."""

    def close(self) -> None:
        """Release what the source holds (idempotent)."""
