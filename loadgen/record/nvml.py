"""NVIDIA GPUs through NVML: power, the energy counter, utilisation, memory, clocks, temperature.

NVML comes from `nvidia-ml-py` (module `pynvml`, the optional extra `loadgen[gpu]`),
imported only when `open_gpus` is called, and only if installed; otherwise the reason
says how to get it. Every GPU NVML sees is read (NVML ignores CUDA_VISIBLE_DEVICES, so
the boundary is every GPU on the host). Joules come from the GPU's total energy counter
(`nvmlDeviceGetTotalEnergyConsumption`, mJ since the driver loaded, Volta and later)
where it has one, else from integrating `nvmlDeviceGetPowerUsage` (mW; on Ampere and
later NVML averages it over about a second). Each figure a GPU does not support is
probed once and left NaN from then on; a figure that fails mid-run is NaN for that read.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

from loadgen.record.devices import Device, Unmeasured

__all__ = ["NvmlGpu", "open_gpus"]

INSTALL_HINT = "pip install 'loadgen[gpu]' (nvidia-ml-py)"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlGpu:
    """One GPU's NVML readings; the module's `nvmlShutdown` is left to `open_gpus`'s closer."""

    def __init__(self, nvml: ModuleType, index: int) -> None:
        self._nvml = nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        self._readers: list[Callable[[], float] | None] = [
            self._supported(reader) for reader in self._all_readers(handle)]
        if self._readers[0] is None and self._readers[1] is None:
            raise ValueError("NVML reports neither power nor an energy counter")
        method = "nvml_energy_counter" if self._readers[1] is not None else "nvml_power"
        self._device = Device(f"gpu{index}", "gpu", _text(nvml.nvmlDeviceGetName(handle)),
                              method)

    def _all_readers(self, handle: Any) -> tuple[Callable[[], float], ...]:
        """One reader per `FIELDS` entry, in that order and in its unit."""
        n = self._nvml
        return (
            lambda: n.nvmlDeviceGetPowerUsage(handle) / 1e3,
            lambda: n.nvmlDeviceGetTotalEnergyConsumption(handle) / 1e3,
            lambda: float(n.nvmlDeviceGetUtilizationRates(handle).gpu),
            lambda: float(n.nvmlDeviceGetMemoryInfo(handle).used),
            lambda: float(n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM)),
            lambda: float(n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_MEM)),
            lambda: float(n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU)),
        )

    def _supported(self, reader: Callable[[], float]) -> Callable[[], float] | None:
        """The reader if it answers now, None if this GPU does not support it."""
        try:
            reader()
        except self._nvml.NVMLError:
            return None
        return reader

    @property
    def device(self) -> Device:
        """What this source reads."""
        return self._device

    def read(self) -> tuple[float, ...]:
        """Every supported figure; NaN for the others and for any that fails now."""
        row = []
        for reader in self._readers:
            try:
                row.append(math.nan if reader is None else reader())
            except self._nvml.NVMLError:
                row.append(math.nan)
        return tuple(row)

    def close(self) -> None:
        """Nothing per GPU: NVML is shut down once, by `open_gpus`'s closer."""


def open_gpus(nvml: ModuleType | None = None,
              ) -> tuple[list[NvmlGpu], list[Unmeasured], Callable[[], None]]:
    """Every readable GPU, why any could not be read, and the closer that shuts NVML down.

    `nvml` stands in for the `pynvml` module (tests pass a fake).
    """
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return [], [Unmeasured("gpu", f"nvidia-ml-py is not installed: {INSTALL_HINT}")], \
                _nothing
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        return [], [Unmeasured("gpu", f"NVML did not start ({_text(exc)}): no NVIDIA driver "
                                      "or GPU on this host")], _nothing
    gpus: list[NvmlGpu] = []
    missing: list[Unmeasured] = []
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as exc:
        count, missing = 0, [Unmeasured("gpu", f"NVML cannot count GPUs: {_text(exc)}")]
    for index in range(count):
        try:
            gpus.append(NvmlGpu(nvml, index))
        except (nvml.NVMLError, ValueError) as exc:
            missing.append(Unmeasured(f"gpu{index}", f"cannot read: {_text(exc)}"))
    if count == 0 and not missing:
        missing.append(Unmeasured("gpu", "NVML sees no GPU"))
    module = nvml

    def shutdown() -> None:
        try:
            module.nvmlShutdown()
        except module.NVMLError:
            pass

    return gpus, missing, shutdown


def _nothing() -> None:
    """The closer when NVML never started."""
