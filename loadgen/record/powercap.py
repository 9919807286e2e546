"""CPU package energy from Linux powercap (RAPL): /sys/class/powercap/<zone>/energy_uj.

Top-level zones named `intel-rapl:N` (Intel, and AMD since Linux 5.8 under the same
driver) or `amd-rapl:N`, whose `name` starts with `package`, are read; sub-zones
(`intel-rapl:N:M`: core, uncore, dram) and `psys` (the whole platform, overlapping the
packages) are not, so the boundary is each CPU package (cores and uncore, not DRAM).
`energy_uj` counts microjoules and wraps to 0 past `max_energy_range_uj`; each read
adds the range back on a wrap, so the counter seen is monotonic as long as two reads
are less than one wrap apart (minutes even at hundreds of watts). Since Linux 5.10
`energy_uj` is readable by root only (CVE-2020-8694): the reason then says so.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from loadgen.record.devices import FIELDS, Device, Unmeasured

__all__ = ["POWERCAP_ROOT", "RaplPackage", "open_packages"]

POWERCAP_ROOT = Path("/sys/class/powercap")
_TOP_ZONE = re.compile(r"^(intel|amd)-rapl:\d+$")
_ENERGY = FIELDS.index("energy_j")


class RaplPackage:
    """One CPU package's RAPL energy counter, unwrapped into joules."""

    def __init__(self, zone: Path, index: int) -> None:
        name = (zone / "name").read_text().strip()
        self._range_uj = int((zone / "max_energy_range_uj").read_text())
        self._fd = os.open(zone / "energy_uj", os.O_RDONLY)
        self._last_uj = self._raw()
        self._wrapped_uj = 0
        self._device = Device(f"cpu-package-{index}", "cpu", name, "rapl_energy_counter")

    @property
    def device(self) -> Device:
        """What this source reads."""
        return self._device

    def _raw(self) -> int:
        return int(os.pread(self._fd, 32, 0))

    def read(self) -> tuple[float, ...]:
        """The unwrapped counter in joules; every other field NaN."""
        row = [math.nan] * len(FIELDS)
        try:
            raw = self._raw()
        except (OSError, ValueError):
            return tuple(row)
        if raw < self._last_uj:
            self._wrapped_uj += self._range_uj
        self._last_uj = raw
        row[_ENERGY] = (raw + self._wrapped_uj) / 1e6
        return tuple(row)

    def close(self) -> None:
        """Close the counter's file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def open_packages(root: Path = POWERCAP_ROOT) -> tuple[list[RaplPackage], list[Unmeasured]]:
    """Every readable CPU package zone under `root`, and why none (or some) could be read."""
    if not root.is_dir():
        return [], [Unmeasured("cpu", f"{root} does not exist (no powercap: not Linux, "
                                      "or the intel_rapl driver is not loaded)")]
    zones = sorted((z for z in root.iterdir() if _TOP_ZONE.match(z.name)),
                   key=lambda z: (z.name.split(":")[0], int(z.name.split(":")[1])))
    packages: list[RaplPackage] = []
    missing: list[Unmeasured] = []
    for zone in zones:
        try:
            if not (zone / "name").read_text().strip().startswith("package"):
                continue  # psys: the whole platform, overlapping the packages
            packages.append(RaplPackage(zone, len(packages)))
        except PermissionError:
            missing.append(Unmeasured("cpu", f"{zone / 'energy_uj'} is not readable by this "
                                             "user (root only since Linux 5.10, CVE-2020-8694)"))
        except (OSError, ValueError) as exc:
            missing.append(Unmeasured("cpu", f"{zone}: cannot read: {exc}"))
    if not packages and not missing:
        missing.append(Unmeasured("cpu", f"{root} has no RAPL package zone "
                                         "(intel-rapl:N or amd-rapl:N named package-N)"))
    return packages, missing
