"""The device readers: NVML through a fake `pynvml`, RAPL through a fake powercap tree."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from loadgen.record.devices import FIELDS
from loadgen.record.nvml import open_gpus
from loadgen.record.powercap import open_packages

from .fakes import FakeGpu, fake_nvml, rapl_zone, set_energy

P, E = FIELDS.index("power_w"), FIELDS.index("energy_j")


class Clock:
    """A clock moved by hand, in ns."""

    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now


def test_each_gpu_reads_every_figure_in_its_unit_and_its_counter_advances() -> None:
    clock = Clock()
    nvml = fake_nvml([FakeGpu(watts=250.0)], clock)
    gpus, missing, close = open_gpus(nvml)
    assert missing == [] and len(gpus) == 1
    gpu = gpus[0]
    assert (gpu.device.name, gpu.device.kind, gpu.device.model) == ("gpu0", "gpu",
                                                                    "NVIDIA Fake H100")
    assert gpu.device.method == "nvml_energy_counter" and gpu.device.counter
    first = gpu.read()
    clock.now += 2_000_000_000
    second = gpu.read()
    assert first[P] == 250.0
    assert second[E] - first[E] == pytest.approx(500.0)  # 250 W for 2 s, in J
    assert dict(zip(FIELDS, second, strict=True)) | {"energy_j": 0} == {
        "power_w": 250.0, "energy_j": 0, "util_pct": 40.0, "memory_used_bytes": float(3 << 30),
        "sm_clock_mhz": 1980.0, "mem_clock_mhz": 2619.0, "temp_c": 55.0}
    close()
    assert nvml.calls[-1] == "nvmlShutdown"


def test_a_gpu_without_an_energy_counter_is_integrated_from_power() -> None:
    nvml = fake_nvml([FakeGpu(counter=False), FakeGpu(counter=False, power=False)])
    gpus, missing, _ = open_gpus(nvml)
    assert [g.device.method for g in gpus] == ["nvml_power"]
    assert math.isnan(gpus[0].read()[E])
    assert [m.source for m in missing] == ["gpu1"]
    assert "neither power nor an energy counter" in missing[0].reason


def test_a_figure_failing_mid_run_is_nan_for_that_read_only() -> None:
    gpu = FakeGpu()
    gpus, _, _ = open_gpus(fake_nvml([gpu]))
    gpu.failing.add("temp")
    assert math.isnan(gpus[0].read()[FIELDS.index("temp_c")])
    gpu.failing.clear()
    assert gpus[0].read()[FIELDS.index("temp_c")] == 55.0


def test_no_driver_says_so() -> None:
    gpus, missing, close = open_gpus(fake_nvml([], init_error=True))
    assert gpus == [] and missing[0].source == "gpu"
    assert "NVML did not start (NVML Shared Library Not Found)" in missing[0].reason
    close()


def test_no_gpu_says_so() -> None:
    gpus, missing, _ = open_gpus(fake_nvml([]))
    assert gpus == [] and missing[0].reason == "NVML sees no GPU"


def test_nvidia_ml_py_not_installed_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    gpus, missing, _ = open_gpus()
    assert gpus == [] and "loadgen[gpu]" in missing[0].reason


def test_the_real_pynvml_has_every_name_the_fake_stands_in_for() -> None:
    real = pytest.importorskip("pynvml")
    fake = fake_nvml([])
    names = [n for n in vars(fake) if n.startswith(("nvml", "NVML"))]
    assert [n for n in names if not hasattr(real, n)] == []


def test_rapl_packages_are_read_and_sub_zones_psys_and_other_zones_are_not(
        tmp_path: Path) -> None:
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 1_000_000)
    rapl_zone(tmp_path, "intel-rapl:0:0", "core", 5)
    rapl_zone(tmp_path, "intel-rapl:1", "psys", 7)
    rapl_zone(tmp_path, "amd-rapl:0", "package-1", 3_000_000)
    rapl_zone(tmp_path, "intel-rapl-mmio:0", "package-0", 9)
    packages, missing = open_packages(tmp_path)
    assert missing == []
    assert [(p.device.name, p.device.model, p.device.method) for p in packages] == [
        ("cpu-package-0", "package-1", "rapl_energy_counter"),
        ("cpu-package-1", "package-0", "rapl_energy_counter")]
    assert [p.read()[E] for p in packages] == [3.0, 1.0]
    assert all(math.isnan(p.read()[P]) for p in packages)


def test_rapl_counter_wrap_around_is_unwrapped(tmp_path: Path) -> None:
    zone = rapl_zone(tmp_path, "intel-rapl:0", "package-0", 900, range_uj=1000)
    (package,), _ = open_packages(tmp_path)
    assert package.read()[E] == pytest.approx(900e-6)
    set_energy(zone, 100)  # wrapped: 100 uJ past the range's end (1000)
    assert package.read()[E] == pytest.approx(1100e-6)
    set_energy(zone, 950)
    assert package.read()[E] == pytest.approx(1950e-6)
    set_energy(zone, 50)  # a second wrap
    assert package.read()[E] == pytest.approx(2050e-6)
    package.close()
    package.close()  # idempotent


def test_no_powercap_or_no_package_says_why(tmp_path: Path) -> None:
    packages, missing = open_packages(tmp_path / "absent")
    assert packages == [] and "does not exist" in missing[0].reason
    rapl_zone(tmp_path, "intel-rapl:0", "psys", 1)
    packages, missing = open_packages(tmp_path)
    assert packages == [] and "no RAPL package zone" in missing[0].reason


def test_an_unreadable_counter_says_root_only(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 1)

    def refuse(*_: object) -> int:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("loadgen.record.powercap.os.open", refuse)
    packages, missing = open_packages(tmp_path)
    assert packages == [] and "root only since Linux 5.10" in missing[0].reason
