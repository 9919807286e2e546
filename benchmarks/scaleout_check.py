"""The scale-out check (issue #28), in about a minute on a 16-core host:

1. the scaling table (`scaling.py`) for 1, 2, 4, 8 load processes, null SUT, saturated;
2. the one-process VALID Server rate on a fixed ladder of rates (null SUT, in process, as
   `issue_capacity.py` probes it), then a 4-process Server run at 4 x 0.8 x that rate;
3. the CPU a query costs, saturated: in process (no worker machinery) against one worker
   and N workers (the scaling rows), and in the Server run the longest each worker's own
   reporting held its issue loop (`longest_report_ns`: 5-7 ms every 2 s was what made
   the 4-process run lag in #28);
4. one JSON summary of all (`--out`), with the pass marks: efficiency >= 0.85 up to 8
   processes, the 4-process run VALID (with the energy meter on, as on any GPU host: its
   idle reading must not make the workers late).

    PYTHONPATH=. python benchmarks/scaleout_check.py --out runs/scaleout-check/scaleout.json
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling `scaling`

from scaling import format_row, print_table, saturated_row, saturated_settings, scaling_table

from loadgen.adapters.null import NullSut
from loadgen.api import run_async, run_loop, run_test
from loadgen.engine.session import run_session
from loadgen.engine.workers.processes import LocalProcesses
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import load_settings
from loadgen.report.result import RunResult

LADDER = (12_500, 25_000, 50_000, 100_000, 150_000, 200_000, 250_000, 300_000, 400_000)
SLO_MS = 1.0
EFFICIENCY_MARK = 0.85


def server_settings(qps: float, duration_s: float, workers: int, cpus: str = "",
                    energy: str = "off") -> Any:
    """A null-SUT Server run as `issue_capacity.py` probes it (pinned to `cpus`)."""
    return load_settings(None, [
        "preset='dev'", f"target_qps={qps}", f"target_latency_ms={SLO_MS}",
        f"min_duration_s={duration_s}", "min_query_count=1000", "warmup_s=0.5",
        f"energy={energy!r}", f"workers={workers}", f"worker_cpus={cpus!r}"])


def pins(processes: int, pin: bool) -> str:
    """With `--pin`: the driver on core 0, the processes on cores 1..N."""
    return f"0-{processes}" if pin else ""


def figures(r: RunResult) -> dict[str, Any]:
    """What a Server run says: verdict, reasons, lag, latency, slack."""
    per = (r.workers or {}).get("per_worker", [])
    return {"valid": r.valid, "reasons": [str(c) for c in r.verdict.codes],
            "qps_scheduled": round(r.stats.qps_scheduled),
            "issue_lag_p50_us": r.stats.issue_lag_ns.p50 / 1e3,
            "issue_lag_p99_us": r.stats.issue_lag_ns.p99 / 1e3,
            "issue_lag_max_us": r.stats.issue_lag_ns.max / 1e3,
            "latency_p99_us": r.stats.latency_ns.p99 / 1e3,
            "start_slack_ms": [None if w["start_slack_ns"] is None else w["start_slack_ns"] / 1e6
                               for w in per],
            "cpu_share": [w["cpu_share"] for w in per],
            "worker_lag_p99_us": [w["issue_lag_ns"]["p99"] / 1e3 for w in per],
            "worker_lag_max_us": [w["issue_lag_ns"]["max"] / 1e3 for w in per],
            "longest_stall_ms": [(w["longest_stall_ns"] or 0) / 1e6 for w in per],
            "longest_report_ms": [(w.get("longest_report_ns") or 0) / 1e6 for w in per],
            "involuntary_switches": [w["involuntary_switches"] for w in per],
            "worker_qps": [round(w["qps_scheduled"]) for w in per],
            "last_cpu": [w.get("last_cpu") for w in per],
            "gc_collections": [w.get("gc_collections") for w in per],
            "plan_in_run_s": [w.get("plan_in_run_s") for w in per],
            "driver_cpu_share": (r.workers or {}).get("driver", {}).get("cpu_share"),
            "skew_bound_us": r.distributed.skew_bound_ns / 1e3 if r.distributed else 0.0,
            "energy_measured": r.energy.measured if r.energy is not None else None}


def one_process_valid_rate(duration_s: float, ladder: tuple[float, ...] = LADDER
                           ) -> tuple[float, list[dict[str, Any]]]:
    """The highest ladder rate whose in-process Server run is VALID (climbing until a rate
    fails twice: one short probe can meet a one-off stall of the host, and the 4-process
    target is sized from this rate). Each probe starts after a full garbage collection, so
    the objects the runs before it left behind are not collected inside it."""
    best, probes = 0.0, []
    for qps in ladder:
        for attempt in (1, 2):
            gc.collect()
            r = run_loop(run_async(server_settings(qps, duration_s, 1), NullSut()))
            probes.append({"qps": qps, "attempt": attempt, **figures(r)})
            print(f"  1 process {qps:>8} QPS  {'VALID' if r.valid else 'INVALID'} "
                  f"{','.join(probes[-1]['reasons'])}  lag p99 "
                  f"{probes[-1]['issue_lag_p99_us']:.0f} us, max "
                  f"{probes[-1]['issue_lag_max_us']:.0f} us (try {attempt})", flush=True)
            if r.valid:
                break
        if not r.valid:
            break
        best = qps
    return best, probes


def in_process_cost(per_process: int) -> dict[str, Any]:
    """One saturated run in this process (the plain engine, no worker machinery): the CPU
    its engine took per query, as a worker measures its own (`SessionOutcome.cpu_s`)."""
    out = run_loop(run_session(RunPlan.of(saturated_settings(1, per_process)), NullSut()))
    queries = max(out.tally.queries, 1)
    return {"queries": out.tally.queries, "cpu_ns_per_query": round(out.cpu_s * 1e9 / queries)}


def cost_line(plain: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """CPU ns a query: in process, then each row's load processes (ratio to in process)."""
    base = plain["cpu_ns_per_query"]
    parts = [f"in process {base}"] + [
        f"{r['processes']} worker{'s' if r['processes'] > 1 else ''} {r['cpu_ns_per_query']} "
        f"(x{r['cpu_ns_per_query'] / base:.2f})" for r in rows if base]
    return "CPU ns a query (saturated, null SUT): " + ", ".join(parts)


def diagnosis(table: dict[str, Any]) -> list[str]:
    """One line a row: how far the rate per process fell, and the suspects' figures beside
    it (each worker's own rate, the host's plain, clock and memory scaling, the clock
    speed, planning and garbage collection while it ran, page faults)."""
    rows = table["rows"]
    if not rows:
        return []
    one = rows[0]
    lines = []
    for r in rows[1:]:
        n = r["processes"]
        mhz = (f"{r['cpu_mhz'] / one['cpu_mhz']:.2f}" if r.get("cpu_mhz") and one.get("cpu_mhz")
               else "n/a")
        lines.append(
            f"{n} processes: efficiency {r['efficiency']}, from the sum of each worker's own "
            f"rate {r['worker_efficiency']} (workers {r['worker_qps_min']}-"
            f"{r['worker_qps_max']} QPS, one alone {one['worker_qps_max']}); host: plain loop "
            f"{r['host_efficiency']}, clock reads {r['clock_efficiency']}, scattered reads "
            f"{r['memory_efficiency']}, clock speed x{mhz}; "
            f"in the run: planning {r['plan_in_run_s_max']} s, {r['gc_collections']} GCs "
            f"({r['gc_ms_max']} ms), {r['minor_faults_per_kq']} page faults a 1000 queries "
            f"(one alone {one['minor_faults_per_kq']}); cores {r['last_cpus']}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/scaleout-check/scaleout.json"))
    parser.add_argument("--processes", default="1,2,4,8", help="rows of the scaling table")
    parser.add_argument("--per-process", type=int, default=300_000,
                        help="queries per process in each saturated run")
    parser.add_argument("--probe-s", type=float, default=1.5, help="seconds per ladder probe")
    parser.add_argument("--server-s", type=float, default=3.0, help="the 4-process run")
    parser.add_argument("--server-workers", type=int, default=4)
    parser.add_argument("--pin", action="store_true",
                        help="pin the driver to core 0 and the processes to cores 1..N")
    parser.add_argument("--ladder", default=",".join(map(str, LADDER)),
                        help="the rates (QPS) climbed for the one-process VALID rate")
    args = parser.parse_args()
    began = time.monotonic()
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio (no uvloop)"
    print(f"Python {platform.python_version()}, event loop {loop}", flush=True)
    counts = [int(x) for x in args.processes.split(",")]
    print("== scaling (null SUT, saturated)", flush=True)
    table = scaling_table(counts, args.per_process,
                          row=lambda n: saturated_row(n, args.per_process,
                                                      cpus=pins(n, args.pin)),
                          echo=lambda r: print("  " + format_row(r), flush=True))
    print_table(table)
    plain = in_process_cost(args.per_process)
    cost = cost_line(plain, table["rows"])
    print("  " + cost, flush=True)
    print(f"== one-process VALID Server rate (ladder, {args.probe_s} s probes, "
          f"SLO {SLO_MS} ms)", flush=True)
    rate, probes = one_process_valid_rate(args.probe_s,
                                          tuple(float(x) for x in args.ladder.split(",")))
    n = args.server_workers
    target = n * 0.8 * rate
    print(f"== {n} processes at {n} x 0.8 x {rate:.0f} = {target:.0f} QPS", flush=True)
    server: dict[str, Any] = {"one_process_valid_qps": rate, "ladder": probes,
                              "workers": n, "target_qps": target}
    if rate:
        # energy on: a readable meter (NVML, RAPL) takes its idle reading before the clocks
        r = run_test(server_settings(target, args.server_s, n, pins(n, args.pin), "auto"),
                     "null", engine=LocalProcesses())
        server["run"] = figures(r)
        run = server["run"]
        print(f"  {'VALID' if r.valid else 'INVALID'} {run['reasons']}; lag p99 "
              f"{run['issue_lag_p99_us']:.0f} us, max {run['issue_lag_max_us']:.0f} us; per "
              f"worker lag p99 {run['worker_lag_p99_us']} us, max {run['worker_lag_max_us']} "
              f"us, longest stall {run['longest_stall_ms']} ms, involuntary switches "
              f"{run['involuntary_switches']}; longest report {run['longest_report_ms']} ms; "
              f"start slack {run['start_slack_ms']} ms; worker QPS {run['worker_qps']}; worker "
              f"CPU {run['cpu_share']}; energy measured {run['energy_measured']}", flush=True)
    causes = diagnosis(table)
    print("== why the rate per process falls (each row against one process)", flush=True)
    for line in causes:
        print("  " + line, flush=True)
    effs = [row["efficiency"] for row in table["rows"] if row["processes"] <= 8]
    summary = {"scaling": table, "in_process": plain, "cost_per_query": cost,
               "diagnosis": causes, "server": server, "pinned": args.pin,
               "event_loop": loop,
               "python": platform.python_version(),
               "seconds": round(time.monotonic() - began, 1),
               "marks": {"efficiency_min_up_to_8": min(effs, default=None),
                         "efficiency_ok": bool(effs) and min(effs) >= EFFICIENCY_MARK,
                         "server_valid": bool(server.get("run", {}).get("valid"))}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    print(f"marks: {summary['marks']}; {summary['seconds']} s; written {args.out}")


if __name__ == "__main__":
    main()
