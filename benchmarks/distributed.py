"""Scale-out: the highest VALID Server rate with 1 and 2 load workers, locally and on Ray.

For the null SUT and an HTTP SUT (the canned OIP server of `http_client.py`, in its own
process), and for each engine (local processes, Ray actors on a local Ray instance), the
highest target QPS whose Server run stays VALID is found by doubling then bisection
(`calibrate.find_ceiling`), with 1 and then 2 workers, all in one run; the ratio 2 / 1 is
printed per line. Every run goes through the worker driver (clocks measured, reports
streamed), so 1 and 2 workers pay the same overheads. The target is 2 workers >= 1.8x one
on a machine with a core for each worker and one for the SUT; with fewer, the figures say
what the machine allows. A probe passes when most of `--repeat` runs are VALID. Because a
VALID ceiling needs a clean p99 issue lag, which any other busy process spoils, the raw
issue rate is printed too, as a scaling table per engine (`scaling.py`: 1, 2, 4, ... N
workers up to the usable cores less two, `--max-processes`; a schedule far faster than
the workers, issued back to back: queries per second of wall time, the efficiency against
one worker, and what the harness itself cost). `--json` prints one JSON document instead.

    .venv/bin/python benchmarks/distributed.py [--duration 2] [--steps 3] [--no-ray] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import multiprocessing
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from http_client import MODEL, serve  # the canned OIP server (a sibling benchmark)
from scaling import print_table, process_counts, saturated_row, scaling_table

from loadgen.api import run_test
from loadgen.campaigns.calibrate import find_ceiling
from loadgen.engine.workers.processes import LocalProcesses
from loadgen.engine.workers.ray_actors import RayEngine
from loadgen.plan.settings import load_settings

SLO_MS = {"null": 5.0, "http": 20.0}  # a Ray worker waits without the GIL: lag ~50 us, not ~1


def probe(spec: str, kind: str, engine: Any, workers: int, duration_s: float,
          repeat: int) -> Callable[[float], tuple[bool, dict[str, Any]]]:
    """A probe for `find_ceiling`: is a Server run at this rate VALID (most of `repeat`)?"""
    def run(qps: float) -> tuple[bool, dict[str, Any]]:
        votes, last = 0, {}
        for _ in range(repeat):
            settings = load_settings(None, [
                "preset='dev'", f"target_qps={qps}", f"target_latency_ms={SLO_MS[kind]}",
                f"min_duration_s={duration_s}", "min_query_count=500", "warmup_s=0.5",
                f"workers={workers}"])
            r = run_test(settings, spec, engine=engine)
            votes += r.valid
            last = {"lag_p99_us": r.stats.issue_lag_ns.p99 / 1e3,
                    "skew_us": r.distributed.skew_bound_ns / 1e3 if r.distributed else 0.0,
                    "why": ",".join(map(str, r.verdict.codes)) or "-"}
        return votes * 2 > repeat, last

    return run


def ceiling(label: str, run: Callable[[float], tuple[bool, dict[str, Any]]], start: float,
            steps: int) -> tuple[float, dict[str, Any]]:
    def report(qps: float, ok: bool, figures: dict[str, Any]) -> None:
        print(f"    {label:<22} {qps:>9.0f} QPS {'VALID' if ok else 'INVALID'}  lag p99 "
              f"{figures['lag_p99_us']:.0f} us, skew bound {figures['skew_us']:.0f} us, "
              f"{figures['why']}", flush=True)

    return find_ceiling(run, start, steps, report)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per probe")
    parser.add_argument("--steps", type=int, default=3, help="bisection steps")
    parser.add_argument("--repeat", type=int, default=1, help="runs per probe (majority)")
    parser.add_argument("--start-null", type=float, default=4000.0, help="first null QPS")
    parser.add_argument("--start-http", type=float, default=500.0, help="first HTTP QPS")
    parser.add_argument("--no-ray", action="store_true", help="local processes only")
    parser.add_argument("--saturate", type=int, default=100_000,
                        help="queries per worker in each raw issue-rate run (a tenth for HTTP)")
    parser.add_argument("--max-processes", type=int, default=None,
                        help="the scaling tables' largest row (default: usable cores - 2)")
    parser.add_argument("--json", action="store_true", help="one JSON document, no text")
    args = parser.parse_args()
    quiet = contextlib.redirect_stdout(io.StringIO()) if args.json else contextlib.nullcontext()
    with quiet:
        doc = measure(args)
    if args.json:
        print(json.dumps(doc, indent=1))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every table and ceiling, printed as it comes; the lot as one document."""
    doc: dict[str, Any] = {"scaling": {}, "valid_qps": {}}
    sock = socket.create_server(("127.0.0.1", 0), reuse_port=True)
    http = f"http://127.0.0.1:{sock.getsockname()[1]}/{MODEL}"
    server = multiprocessing.get_context("fork").Process(target=serve, args=(sock,),
                                                          daemon=True)
    server.start()
    engines: list[tuple[str, Any]] = [("local", LocalProcesses)]
    ray = None if args.no_ray else RayEngine("local")
    if ray is not None:
        engines.append(("ray", lambda: ray))
    started = time.monotonic()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; "
          f"{args.duration} s per probe, {args.steps} bisection steps", flush=True)
    lines = []
    try:
        for kind, spec, start in (("null", "null", args.start_null),
                                  ("http", http, args.start_http)):
            for name, make in engines:
                queries = args.saturate // (1 if kind == "null" else 10)
                table = scaling_table(
                    process_counts(args.max_processes), queries,
                    row=lambda n, spec=spec, make=make, queries=queries: saturated_row(
                        n, queries, spec, make()))
                doc["scaling"][f"{kind} {name}"] = table
                print(f"{kind} {name}: raw issue rate")
                print_table(table, sut=f"{kind} SUT")
                peaks = []
                for workers in (1, 2):
                    label = f"{kind} {name} x{workers}"
                    peak, _ = ceiling(label, probe(spec, kind, make(), workers, args.duration,
                                                   args.repeat), start, args.steps)
                    peaks.append(peak)
                doc["valid_qps"][f"{kind} {name}"] = peaks
                ratio = f"{peaks[1] / peaks[0]:.2f}x" if peaks[0] else "n/a"
                lines.append(f"{kind:<5} {name:<6} VALID ceiling:  1 worker {peaks[0]:>9.0f} QPS   "
                             f"2 workers {peaks[1]:>9.0f} QPS   ratio {ratio}")
                print(lines[-1], flush=True)
    finally:
        if ray is not None:
            ray.shutdown()
        server.kill()
        server.join(5)
    print(f"raw issue rates and highest VALID Server rates (p99 SLO null {SLO_MS['null']} ms, "
          f"http {SLO_MS['http']} ms), {time.monotonic() - started:.0f} s in all:")
    for line in lines:
        print("  " + line)
    return doc


if __name__ == "__main__":
    main()
