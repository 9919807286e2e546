"""What the rest of the host did during a run: other processes' CPU time, CPU steal, load.

A run that falls behind its schedule on a busy host measured the host. Two readings of
`/proc/stat` (all CPUs), this process's own CPU time (`getrusage`, children that ended
included) and `/proc/loadavg`, one before and one after the run, give:

- `other_cpu_s`: CPU time spent by everything but this process (other processes, and
  load workers still running); `other_cpu_share` is it over wall time x cores;
- `steal_pct`: time a virtual machine's host took the cores (`steal` in /proc/stat);
- `loadavg_start`, `loadavg_end`: the 1-minute load average at each end.

`busy` says the host was busy enough to explain a lagging issuer. Linux only: elsewhere
`sample_host` returns None and the result says nothing about the host.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["BUSY_LOAD_PER_CORE", "BUSY_OTHER_SHARE", "BUSY_STEAL_PCT", "HostLoad", "HostSample",
           "host_load", "sample_host"]

BUSY_OTHER_SHARE = 0.25
"""Other processes using this fraction of all cores' time make the host busy."""
BUSY_STEAL_PCT = 10.0
"""This much CPU steal makes the host busy."""
BUSY_LOAD_PER_CORE = 1.0
"""A 1-minute load average at or above this many per core makes the host busy."""

_STAT = Path("/proc/stat")
_LOADAVG = Path("/proc/loadavg")


@dataclass(frozen=True, slots=True)
class HostSample:
    """One reading: wall clock, all CPUs' busy and steal time, this process's CPU time."""

    wall_s: float
    busy_s: float  # every CPU, not idle, not iowait, not steal
    steal_s: float
    total_s: float
    own_cpu_s: float
    loadavg: float


@dataclass(frozen=True, slots=True)
class HostLoad:
    """The host's load over a run (see the module docstring)."""

    wall_s: float
    cores: int
    other_cpu_s: float
    other_cpu_share: float
    steal_pct: float
    loadavg_start: float
    loadavg_end: float

    @property
    def busy(self) -> bool:
        """Whether the host was busy enough to explain an issuer that fell behind."""
        return (self.other_cpu_share >= BUSY_OTHER_SHARE or self.steal_pct >= BUSY_STEAL_PCT
                or max(self.loadavg_start, self.loadavg_end) >= BUSY_LOAD_PER_CORE * self.cores)

    def as_dict(self) -> dict[str, Any]:
        """result.json's `environment.host_load`."""
        return {"wall_s": round(self.wall_s, 3), "cores": self.cores,
                "other_cpu_s": round(self.other_cpu_s, 3),
                "other_cpu_share": round(self.other_cpu_share, 4),
                "steal_pct": round(self.steal_pct, 2), "loadavg_start": self.loadavg_start,
                "loadavg_end": self.loadavg_end, "busy": self.busy}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> HostLoad:
        """Read back `as_dict`."""
        return cls(float(doc["wall_s"]), int(doc["cores"]), float(doc["other_cpu_s"]),
                   float(doc["other_cpu_share"]), float(doc["steal_pct"]),
                   float(doc["loadavg_start"]), float(doc["loadavg_end"]))

    def phrase(self) -> str:
        """'other processes used 61% of the 2 cores, CPU steal 12%, load average 7.2'."""
        parts = [(f"other processes used {self.other_cpu_share:.0%} of the {self.cores} "
                 f"core{'s' if self.cores != 1 else ''}")]
        if self.steal_pct >= 1:
            parts.append(f"CPU steal {self.steal_pct:.0f}%")
        parts.append(f"load average {max(self.loadavg_start, self.loadavg_end):.1f}")
        return ", ".join(parts)


def sample_host() -> HostSample | None:
    """Read the host's counters now; None where /proc is not there (not Linux)."""
    try:
        fields = _STAT.read_text().split("\n", 1)[0].split()[1:]
        loadavg = float(_LOADAVG.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    tick = os.sysconf("SC_CLK_TCK")
    ticks = [int(x) / tick for x in fields]
    user, nice, system, idle, iowait, irq, softirq = ticks[:7]
    steal = ticks[7] if len(ticks) > 7 else 0.0
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    own_cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    busy = user + nice + system + irq + softirq  # guest time is inside user already
    return HostSample(time.monotonic(), busy, steal, busy + idle + iowait + steal, own_cpu,
                      loadavg)


def host_load(start: HostSample | None, end: HostSample | None,
              cores: int | None = None) -> HostLoad | None:
    """The load between two samples (None when either is missing or no time passed)."""
    if start is None or end is None or end.wall_s <= start.wall_s:
        return None
    n = cores or os.cpu_count() or 1
    wall = end.wall_s - start.wall_s
    other = max(0.0, (end.busy_s - start.busy_s) - (end.own_cpu_s - start.own_cpu_s))
    total = end.total_s - start.total_s
    steal = 100.0 * (end.steal_s - start.steal_s) / total if total > 0 else 0.0
    return HostLoad(wall, n, other, min(1.0, other / (wall * n)), steal, start.loadavg,
                    end.loadavg)
