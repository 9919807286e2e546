"""The scaling table: a saturated null-SUT run on 1, 2, 4, ... N load processes, with what
the harness itself cost (result.json `workers`) and the host it ran on.

Each row is one run through the worker driver (clocks, release, reports), so every
process count pays the same overheads: a schedule far faster than the processes (target
1e8 QPS), `--per-process` queries for each process, issued back to back. Its rate is
queries per second of wall time; efficiency = rate / (N x the one-process rate), and
the rate per core the workers actually got (rate / their summed CPU share: on a shared
host, what scaling would give with a core each). Beside
it: each worker's CPU share (min and mean; a saturated worker should hold ~100% of a
core), its longest loop stall, involuntary context switches, messages and KiB sent, the
smallest start slack, and the driver's CPU share and largest gap between reads. Shared
by `issue_capacity.py` and `distributed.py` (a sibling import, as `http_client` is).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loadgen.api import run_test
from loadgen.engine.workers.processes import LocalProcesses
from loadgen.plan.settings import load_settings

__all__ = ["host_figures", "print_table", "process_counts", "saturated_row", "scaling_table"]


def physical_cores() -> int | None:
    """Distinct (package, core) pairs in sysfs; None where the topology is not readable."""
    pairs = set()
    for cpu in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
        try:
            pairs.add(((cpu / "physical_package_id").read_text().strip(),
                       (cpu / "core_id").read_text().strip()))
        except OSError:
            continue
    return len(pairs) or None


def host_figures() -> dict[str, Any]:
    """The host: physical and logical cores, the cores this process may use, load average."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"physical_cores": physical_cores(), "logical_cores": os.cpu_count(),
            "usable_cores": usable, "load_average": [round(x, 2) for x in os.getloadavg()]}


def process_counts(most: int | None = None) -> list[int]:
    """1, 2, 4, ... up to `most` (default: the usable cores less two, at least 2), and
    `most` itself when it is no power of two."""
    if most is None:
        usable = host_figures()["usable_cores"] or os.cpu_count() or 1
        most = max(usable - 2, 2)
    counts, n = [], 1
    while n <= most:
        counts.append(n)
        n *= 2
    return counts + ([most] if counts[-1] != most else [])


def saturated_row(processes: int, per_process: int, spec: str = "null",
                  engine: Any = None, cpus: str = "") -> dict[str, Any]:
    """One saturated run on `processes` load processes: its rate and the harness's cost."""
    settings = load_settings(None, [
        "preset='dev'", "target_qps=1e8", "target_latency_ms=1000", "min_duration_s=0",
        f"min_query_count={per_process * processes}", "warmup_s=0", "max_issue_lag_ms=1e9",
        "energy='off'", f"workers={processes}", f"worker_cpus={cpus!r}"])
    r = run_test(settings, spec, engine=engine if engine is not None else LocalProcesses())
    block = r.workers or {}
    per = block.get("per_worker", [])
    shares = [w["cpu_share"] for w in per]
    driver = block.get("driver", {})
    return {
        "processes": processes, "qps": round(float(r.stats.qps_completed)),
        "qps_per_core": round(r.stats.qps_completed / sum(shares)) if sum(shares) else None,
        "queries": r.stats.queries,
        "cpu_share_min": min(shares, default=0.0),
        "cpu_share_mean": round(sum(shares) / len(shares), 3) if shares else 0.0,
        "longest_stall_ms": max((w["longest_stall_ns"] or 0 for w in per), default=0) / 1e6,
        "involuntary_switches": sum(w["involuntary_switches"] or 0 for w in per),
        "messages": sum(w["messages"] or 0 for w in per),
        "sent_kib": round(sum(w["sent_kib"] or 0 for w in per), 1),
        "start_slack_min_ms": min((w["start_slack_ns"] or 0 for w in per), default=0) / 1e6,
        "driver_cpu_share": driver.get("cpu_share"),
        "driver_read_gap_ms": (driver.get("largest_read_gap_ns") or 0) / 1e6,
        "issue_lag_p99_ms": r.stats.issue_lag_ns.p99 / 1e6,
        "cpus": [w.get("cpus") for w in per], "driver_cpus": driver.get("cpus"),
        "verdict": list(map(str, r.verdict.codes)),
    }


def scaling_table(counts: Sequence[int], per_process: int,
                  row: Callable[[int], dict[str, Any]] | None = None,
                  echo: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Every row, with each one's efficiency against the one-process rate."""
    make = row or (lambda n: saturated_row(n, per_process))
    rows: list[dict[str, Any]] = []
    for n in counts:
        got = make(n)
        one = rows[0]["qps"] if rows else got["qps"]
        got["efficiency"] = round(got["qps"] / (n * one), 3) if one else None
        rows.append(got)
        if echo is not None:
            echo(got)
    return {"host": host_figures(), "per_process_queries": per_process, "rows": rows}


HEADER = (f"{'procs':>5} {'QPS':>10} {'eff':>5} {'QPS/core':>9} {'cpu min':>7} {'cpu avg':>7} "
          f"{'stall ms':>8} {'invcs':>6} {'msgs':>5} {'KiB':>7} {'slack ms':>8} "
          f"{'drv cpu':>7} {'gap ms':>6} {'lag p99 ms':>10}")


def format_row(r: dict[str, Any]) -> str:
    """One row of the table."""
    eff = "-" if r.get("efficiency") is None else f"{r['efficiency']:.2f}"
    drv = "-" if r["driver_cpu_share"] is None else f"{r['driver_cpu_share']:.0%}"
    per_core = "-" if r.get("qps_per_core") is None else f"{r['qps_per_core']:.0f}"
    return (f"{r['processes']:>5} {r['qps']:>10.0f} {eff:>5} {per_core:>9} "
            f"{r['cpu_share_min']:>7.0%} "
            f"{r['cpu_share_mean']:>7.0%} {r['longest_stall_ms']:>8.1f} "
            f"{r['involuntary_switches']:>6} {r['messages']:>5} {r['sent_kib']:>7.1f} "
            f"{r['start_slack_min_ms']:>8.1f} {drv:>7} {r['driver_read_gap_ms']:>6.1f} "
            f"{r['issue_lag_p99_ms']:>10.3f}")


def print_table(table: dict[str, Any], as_json: bool = False, sut: str = "null SUT") -> None:
    """The table as text (host line, header, rows), or as one JSON document."""
    if as_json:
        print(json.dumps(table, indent=1))
        return
    h = table["host"]
    print(f"host: {h['physical_cores']} physical / {h['logical_cores']} logical cores "
          f"({h['usable_cores']} usable), load average "
          + " ".join(f"{x:.2f}" for x in h["load_average"])
          + f"; {table['per_process_queries']} queries per process, {sut}, saturated")
    print(HEADER)
    for r in table["rows"]:
        print(format_row(r))
