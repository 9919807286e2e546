"""A fake `pynvml` module whose counters advance with the clock, and a fake powercap tree."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType, SimpleNamespace


class NVMLError(Exception):
    """As pynvml's base error."""


class NVMLError_NotSupported(NVMLError):
    """As pynvml's."""


class NVMLError_LibraryNotFound(NVMLError):
    """As pynvml's."""


@dataclass
class FakeGpu:
    """One GPU: constant power; the energy counter advances at that power on `clock`."""

    name: str = "NVIDIA Fake H100"
    watts: float = 100.0
    counter: bool = True  # has nvmlDeviceGetTotalEnergyConsumption
    power: bool = True  # has nvmlDeviceGetPowerUsage
    util: int = 40
    memory_used: int = 3 << 30
    sm_mhz: int = 1980
    mem_mhz: int = 2619
    temp_c: int = 55
    start_mj: int = 5_000_000  # the counter counts since the driver loaded
    failing: set[str] = field(default_factory=set)  # functions that fail now (NVMLError)


def fake_nvml(gpus: list[FakeGpu], clock: Callable[[], int] = time.perf_counter_ns,
              init_error: bool = False) -> ModuleType:
    """A module object with the pynvml functions `loadgen.record.nvml` calls."""
    t0 = clock()
    calls: list[str] = []
    nvml = ModuleType("pynvml")

    def gpu(handle: int, fn: str, supported: bool = True) -> FakeGpu:
        calls.append(fn)
        g = gpus[handle]
        if not supported:
            raise NVMLError_NotSupported("Not Supported")
        if fn in g.failing:
            raise NVMLError("Unknown Error")
        return g

    def init() -> None:
        calls.append("nvmlInit")
        if init_error:
            raise NVMLError_LibraryNotFound("NVML Shared Library Not Found")

    def energy(h: int) -> int:
        g = gpu(h, "energy", gpus[h].counter)
        return round(g.start_mj + g.watts * (clock() - t0) / 1e6)

    ns = {
        "NVMLError": NVMLError, "NVMLError_NotSupported": NVMLError_NotSupported,
        "NVML_CLOCK_SM": 1, "NVML_CLOCK_MEM": 2, "NVML_TEMPERATURE_GPU": 0,
        "calls": calls,
        "nvmlInit": init,
        "nvmlShutdown": lambda: calls.append("nvmlShutdown"),
        "nvmlDeviceGetCount": lambda: len(gpus),
        "nvmlDeviceGetHandleByIndex": lambda i: i,
        "nvmlDeviceGetName": lambda h: gpus[h].name.encode(),
        "nvmlDeviceGetPowerUsage": lambda h: round(gpu(h, "power", gpus[h].power).watts * 1e3),
        "nvmlDeviceGetTotalEnergyConsumption": energy,
        "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(
            gpu=gpu(h, "util").util, memory=10),
        "nvmlDeviceGetMemoryInfo": lambda h: SimpleNamespace(
            used=gpu(h, "memory").memory_used, total=80 << 30),
        "nvmlDeviceGetClockInfo": lambda h, kind: (gpu(h, "clock").sm_mhz if kind == 1
                                                   else gpus[h].mem_mhz),
        "nvmlDeviceGetTemperature": lambda h, kind: gpu(h, "temp").temp_c,
    }
    for name, value in ns.items():
        setattr(nvml, name, value)
    return nvml


def rapl_zone(root: Path, zone: str, name: str, energy_uj: int,
              range_uj: int = 262_143_328_850) -> Path:
    """One powercap zone directory with its three files."""
    path = root / zone
    path.mkdir(parents=True)
    (path / "name").write_text(name + "\n")
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "max_energy_range_uj").write_text(f"{range_uj}\n")
    return path


def set_energy(zone: Path, energy_uj: int) -> None:
    """Move a zone's counter (as the kernel would)."""
    (zone / "energy_uj").write_text(f"{energy_uj}\n")
