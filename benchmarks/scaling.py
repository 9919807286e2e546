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
smallest start slack, and the driver's CPU share and largest gap between reads; what could
make a worker's cost per query grow with N: each worker's own rate (min and max: the
slowest one sets the run's end; their sum over N x the one-process rate is
`worker_efficiency`, which is above `efficiency` by what stragglers cost), the time spent planning its share (the most of any
worker), garbage collections and their time, peak RSS, minor page faults per 1000
queries, and the cores' mean clock (MHz, sampled during the run: turbo falls as more
cores are busy; None where the host does not say); and the
host's own scaling for the same N (`host_efficiency`: N processes each spinning a plain
Python loop, released together; `clock_efficiency`: the same with a loop that reads the
clock, as the harness does about three times a query, beside the host's clock source and
what a read costs; `memory_efficiency`: reads scattered over ~11 MB of Python objects
per process, which one process alone keeps in the shared cache and eight do not): on a VM whose vCPUs share physical cores the hardware itself falls
short of N x, and where clock reads contend, so does every query; the harness can do
no better. Shared by
`issue_capacity.py`, `distributed.py` and `scaleout_check.py` (sibling imports, as
`http_client` is).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from loadgen.api import run_test
from loadgen.engine.workers.processes import LocalProcesses
from loadgen.plan.settings import load_settings

__all__ = ["clock_read_ns", "clocksource", "host_efficiency", "host_figures", "print_table", "process_counts", "saturated_row",
           "scaling_table"]

SPIN_S = 0.5  # how long each process spins in `host_efficiency`


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


def clocksource() -> str | None:
    """The kernel's clock source (tsc, kvm-clock, hpet, ...): a clock read is a cheap
    vDSO call on tsc and kvm-clock, a slow and shared one on some others."""
    try:
        return Path("/sys/devices/system/clocksource/clocksource0/current_clocksource"
                    ).read_text().strip()
    except OSError:
        return None


def clock_read_ns(reads: int = 200_000) -> float:
    """What one `time.perf_counter_ns()` costs this process (the harness reads the clock
    about three times a query)."""
    clock = time.perf_counter_ns
    began = clock()
    for _ in range(reads):
        clock()
    return round((clock() - began) / reads, 1)


def host_figures() -> dict[str, Any]:
    """The host: physical and logical cores, the cores this process may use, load average,
    its clock source and what a clock read costs."""
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {"physical_cores": physical_cores(), "logical_cores": os.cpu_count(),
            "usable_cores": usable, "load_average": [round(x, 2) for x in os.getloadavg()],
            "clocksource": clocksource(), "clock_read_ns": clock_read_ns()}


HEAP_OBJECTS = 100_000  # `_spin`'s scattered reads: ~11 MB of tuples, beyond a core's own caches
STRIDE = 7919  # a prime: every object once a lap, neighbours never in a row


def _spin(barrier: Any, out: Any) -> None:
    """One process of `host_efficiency`, a third of `SPIN_S` each once all are ready:
    plain loop iterations, clock reads, and reads scattered over a heap of Python
    objects (as the harness's own objects are), per second."""
    third, clock = SPIN_S / 3, time.perf_counter_ns
    heap = [(i, i + 1) for i in range(HEAP_OBJECTS)]
    barrier.wait(60)
    count, end = 0, time.perf_counter() + third
    while time.perf_counter() < end:
        for _ in range(1000):
            count += 1
    barrier.wait(60)
    reads, end_ns = 0, clock() + int(third * 1e9)
    while clock() < end_ns:
        reads += 1
    barrier.wait(60)
    touched, at, end = 0, 0, time.perf_counter() + third
    while time.perf_counter() < end:
        for _ in range(1000):
            at = (at + STRIDE) % HEAP_OBJECTS
            touched += heap[at][1] > 0
    out.send((count / third, reads / third, touched / third))
    out.close()


def host_efficiency(processes: int) -> dict[str, float]:
    """What `processes` spinning processes do per second, over `processes` x what one
    process alone does: the host's own scaling without the harness, for a plain loop
    (`host_efficiency`), a loop reading the clock (`clock_efficiency`: below the first
    where clock reads contend, as on a shared clock source) and reads scattered over a
    heap of Python objects (`memory_efficiency`: below the first where the processes
    contend for the shared cache and memory)."""
    def total(n: int) -> tuple[float, ...]:
        ctx = multiprocessing.get_context("spawn")
        barrier = ctx.Barrier(n)
        pipes = [ctx.Pipe(duplex=False) for _ in range(n)]
        procs = [ctx.Process(target=_spin, args=(barrier, w), daemon=True) for _, w in pipes]
        for p in procs:
            p.start()
        rates = [r.recv() if r.poll(60) else (0.0, 0.0, 0.0) for r, _ in pipes]
        for p in procs:
            p.join(10)
        return tuple(sum(r[i] for r in rates) for i in range(3))

    many, one = total(processes), total(1)
    names = ("host_efficiency", "clock_efficiency", "memory_efficiency")
    return {name: round(m / (processes * o), 3) if o else 0.0
            for name, m, o in zip(names, many, one, strict=True)}


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


def saturated_settings(processes: int, per_process: int, cpus: str = "") -> Any:
    """A saturated run (every query due at once) of `per_process` queries a process."""
    return load_settings(None, [
        "preset='dev'", "target_qps=1e8", "target_latency_ms=1000", "min_duration_s=0",
        f"min_query_count={per_process * processes}", "warmup_s=0", "max_issue_lag_ms=1e9",
        "energy='off'", f"workers={processes}", f"worker_cpus={cpus!r}"])


def saturated_row(processes: int, per_process: int, spec: str = "null",
                  engine: Any = None, cpus: str = "") -> dict[str, Any]:
    """One saturated run on `processes` load processes: its rate and the harness's cost."""
    settings = saturated_settings(processes, per_process, cpus)
    with ClockSampler() as clock:
        r = run_test(settings, spec, engine=engine if engine is not None else LocalProcesses())
    block = r.workers or {}
    per = block.get("per_worker", [])
    shares = [w["cpu_share"] for w in per]
    driver = block.get("driver", {})
    rates = [w["qps_scheduled"] for w in per]
    queries = max(r.stats.queries, 1)

    def most(key: str) -> Any:
        return max((w.get(key) or 0 for w in per), default=0)

    return {
        "processes": processes, "qps": round(float(r.stats.qps_completed)),
        "qps_per_core": round(r.stats.qps_completed / sum(shares)) if sum(shares) else None,
        "cpu_ns_per_query": round(1e9 * sum(w["cpu_s"] for w in per) / max(queries, 1)),
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
        "last_cpus": [w.get("last_cpu") for w in per],
        "worker_qps": [round(x) for x in rates],
        "verdict": list(map(str, r.verdict.codes)),
        "worker_qps_min": round(min(rates, default=0.0)),
        "worker_qps_max": round(max(rates, default=0.0)),
        "worker_qps_sum": round(sum(rates)),
        "plan_s_max": most("plan_s"), "plan_in_run_s_max": most("plan_in_run_s"),
        "gc_collections": sum(w.get("gc_collections") or 0 for w in per),
        "gc_ms_max": most("gc_ms"), "rss_mib_max": most("max_rss_mib"),
        "minor_faults_per_kq": round(1000 * sum(w.get("minor_faults") or 0 for w in per)
                                     / queries, 2),
        "cpu_mhz": clock.mean_mhz(),
    }


class ClockSampler:
    """The cores' mean clock (MHz) while a `with` block runs, sampled 4 times a second
    from cpufreq (else /proc/cpuinfo); None where neither says."""

    def __init__(self) -> None:
        self._samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> ClockSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def mean_mhz(self) -> float | None:
        return round(sum(self._samples) / len(self._samples)) if self._samples else None

    def _sample(self) -> None:
        while not self._stop.wait(0.25):
            mhz = _core_mhz()
            if mhz:
                self._samples.append(sum(mhz) / len(mhz))


def _core_mhz() -> list[float]:
    """Every core's current clock in MHz (empty where the host does not say)."""
    found = []
    for path in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            found.append(int(path.read_text()) / 1000)
        except (OSError, ValueError):
            continue
    if found:
        return found
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    return [float(line.split(":")[1]) for line in text.splitlines() if line.startswith("cpu MHz")]


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
        first = rows[0]["worker_qps_sum"] if rows else got["worker_qps_sum"]
        got["worker_efficiency"] = round(got["worker_qps_sum"] / (n * first), 3) if first \
            else None
        got.update({"host_efficiency": 1.0, "clock_efficiency": 1.0, "memory_efficiency": 1.0}
                   if n == 1
                   else host_efficiency(n))
        rows.append(got)
        if echo is not None:
            echo(got)
    return {"host": host_figures(), "per_process_queries": per_process, "rows": rows}


HEADER = (f"{'procs':>5} {'QPS':>10} {'eff':>5} {'host':>5} {'QPS/core':>9} {'cpu min':>7} {'cpu avg':>7} "
          f"{'stall ms':>8} {'invcs':>6} {'msgs':>5} {'KiB':>7} {'slack ms':>8} "
          f"{'drv cpu':>7} {'gap ms':>6} {'lag p99 ms':>10} {'clock':>5} {'mem':>5} {'w eff':>5} {'wQPS min':>9} {'wQPS max':>9} "
          f"{'plan s':>6} {'gc':>5} {'gc ms':>6} {'RSS MiB':>7} {'flt/kq':>6} {'MHz':>5}")


def format_row(r: dict[str, Any]) -> str:
    """One row of the table."""
    eff = "-" if r.get("efficiency") is None else f"{r['efficiency']:.2f}"
    drv = "-" if r["driver_cpu_share"] is None else f"{r['driver_cpu_share']:.0%}"
    per_core = "-" if r.get("qps_per_core") is None else f"{r['qps_per_core']:.0f}"
    host = "-" if r.get("host_efficiency") is None else f"{r['host_efficiency']:.2f}"
    return (f"{r['processes']:>5} {r['qps']:>10.0f} {eff:>5} {host:>5} {per_core:>9} "
            f"{r['cpu_share_min']:>7.0%} "
            f"{r['cpu_share_mean']:>7.0%} {r['longest_stall_ms']:>8.1f} "
            f"{r['involuntary_switches']:>6} {r['messages']:>5} {r['sent_kib']:>7.1f} "
            f"{r['start_slack_min_ms']:>8.1f} {drv:>7} {r['driver_read_gap_ms']:>6.1f} "
            f"{r['issue_lag_p99_ms']:>10.3f} {r.get('clock_efficiency', 1.0):>5.2f} "
            f"{r.get('memory_efficiency', 1.0):>5.2f} "
            f"{'-' if r.get('worker_efficiency') is None else format(r['worker_efficiency'], '.2f'):>5} "
            f"{r['worker_qps_min']:>9} {r['worker_qps_max']:>9} "
            f"{r['plan_s_max']:>6.2f} {r['gc_collections']:>5} {r['gc_ms_max']:>6.1f} "
            f"{r['rss_mib_max']:>7.0f} {r['minor_faults_per_kq']:>6.1f} "
            f"{'-' if r['cpu_mhz'] is None else r['cpu_mhz']:>5}")


def print_table(table: dict[str, Any], as_json: bool = False, sut: str = "null SUT") -> None:
    """The table as text (host line, header, rows), or as one JSON document."""
    if as_json:
        print(json.dumps(table, indent=1))
        return
    h = table["host"]
    print(f"host: {h['physical_cores']} physical / {h['logical_cores']} logical cores "
          f"({h['usable_cores']} usable), load average "
          + " ".join(f"{x:.2f}" for x in h["load_average"])
          + f"; clock {h['clocksource']}, a read {h['clock_read_ns']} ns"
          + f"; {table['per_process_queries']} queries per process, {sut}, saturated")
    print(HEADER)
    for r in table["rows"]:
        print(format_row(r))
