"""What a load worker's own ticks cost its issue loop (#28): CPU per glance and per report.

Runs one `WorkerCore` in this process (null SUT, Server), its messages pickled as the
pipe would carry them, and times with the thread's CPU clock (not the wall: on a busy
host the wall counts the time others ran) each running `Glance` the engine computes for
it and each progress tick (a REPORT every 2 s, a light PROGRESS between). Each is time
the issue loop spends on no query; the in-process Server probes, without a display,
spend none of it. Against 5-9 ms a report and ~1 ms a glance (4 a second) before.

    PYTHONPATH=. python benchmarks/worker_ticks.py --qps 100000 --seconds 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling `scaleout_check`

from scaleout_check import server_settings

import loadgen.engine.runner as runner
from loadgen.engine.session import run_loop
from loadgen.engine.workers.base import REPORT
from loadgen.engine.workers.core import WorkerCore
from loadgen.plan.plan import RunPlan
from loadgen.record.progress import Progress


def _timed(into: list[int], f: Callable[..., Any]) -> Callable[..., Any]:
    def wrapped(*args: Any) -> Any:
        began = time.thread_time_ns()
        try:
            return f(*args)
        finally:
            into.append(time.thread_time_ns() - began)
    return wrapped


def measure(qps: float, seconds: float) -> dict[str, Any]:
    """One worker's run: its glances', reports' and light ticks' CPU (ms)."""
    glances: list[int] = []
    ticks: list[tuple[str, int]] = []
    sizes: dict[str, int] = {}
    kinds: list[str] = []

    def send(kind: str, body: Any) -> int:
        data = ForkingPickler.dumps((kind, body))
        sizes[kind] = max(sizes.get(kind, 0), len(data))
        kinds.append(kind)
        return len(data)

    worker = WorkerCore(RunPlan.of(server_settings(qps, seconds, 1)), "null", 0, 1, None, send)
    tick = worker._report

    def timed_tick(p: Progress) -> None:
        began = time.thread_time_ns()
        tick(p)
        ticks.append((kinds[-1] if kinds else "", time.thread_time_ns() - began))

    worker._report = timed_tick  # type: ignore[method-assign]
    plain_glance = runner.glance
    runner.glance = _timed(glances, plain_glance)  # type: ignore[assignment]

    async def release() -> int:
        return time.perf_counter_ns() + 20_000_000

    try:
        run_loop(worker.run(release))
    finally:
        runner.glance = plain_glance  # type: ignore[assignment]

    def ms(values: list[int]) -> dict[str, float | int]:
        return {"count": len(values),
                "median_ms": round(statistics.median(values) / 1e6, 3) if values else 0.0,
                "max_ms": round(max(values, default=0) / 1e6, 3)}

    return {"glance": ms(glances), "report": ms([ns for k, ns in ticks if k == REPORT]),
            "progress": ms([ns for k, ns in ticks if k != REPORT]),
            "report_kib": round(sizes.get(REPORT, 0) / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qps", type=float, default=100_000)
    parser.add_argument("--seconds", type=float, default=4.0)
    args = parser.parse_args()
    got = measure(args.qps, args.seconds)
    for what in ("glance", "report", "progress"):
        g = got[what]
        print(f"{what:>8}: {g['count']:>3} ticks, CPU median {g['median_ms']} ms, "
              f"max {g['max_ms']} ms")
    print(f"largest report {got['report_kib']} KiB")


if __name__ == "__main__":
    main()
