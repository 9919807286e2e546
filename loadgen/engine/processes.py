"""Several load processes on one host, merged into one outcome.

Each process (spawned, so nothing is shared by accident) builds its own SUT
adapter from the spec string and its own event loop, and runs the same
session as a single-process run (`engine.session`) on its round-robin share
of the global plan (`schedule.partition`), so together they issue exactly the
single-process schedule. All start at one `perf_counter_ns`
time (CLOCK_MONOTONIC, the same in every process on the host), after every SUT
has started. Each sends back its tally (HDR histograms as V2 text, counters,
windows, times); the parent merges them exactly, and the merged run is judged
like any other, with `workers` holding each process's figures.

Query ids are global (process i issues i, i + N, ...); each process's query
log (bin and csv) goes to RUN_DIR/workers/<i>/, and the parent appends them
into RUN_DIR/queries.bin (read it with `querylog.read_binary`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.engine.runner import Progress
from loadgen.engine.session import SessionOutcome, Share, run_loop, run_session
from loadgen.errors import SutError
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import TestSettings
from loadgen.record.energy import EnergyMeter
from loadgen.record.glance import merge_glances
from loadgen.record.histograms import summary_ns
from loadgen.record.querylog import BINARY_FILE, KINDS_FILE, RECORD
from loadgen.record.tally import Tally, merge_tallies

__all__ = ["READY_TIMEOUT_S", "START_MARGIN_NS", "WORKERS_DIR", "run_processes",
           "workers_warning"]

READY_TIMEOUT_S = 300.0  # a builtin SUT loads (and maybe trains) its model first
START_MARGIN_NS = 100_000_000  # from the start signal to the shared start time
WORKERS_DIR = "workers"


def workers_warning(settings: TestSettings, spec: str) -> str | None:
    """What to say before a run with several load processes: one model per process with
    the builtin SUT, and no core left over when there are as many processes as cores."""
    n, cores = settings.workers, os.cpu_count() or 1
    said = []
    if n > 1 and spec.startswith("builtin:"):
        said.append(f"{n} load processes with the in-process builtin SUT load {n} separate "
                    f"models, one per process: this measures {n} servers, not one")
    if n > 1 and n >= cores:
        said.append(f"{n} load processes on {cores} cores: each spins to keep its schedule, "
                    "so no core is left for the SUT or anything else and the issue lag will "
                    f"spike; use at most {max(cores - 1, 1)}")
    return "; ".join(said) or None


async def _work(plan: RunPlan, spec: str, index: int, conn: Connection,
                log_dir: Path | None) -> None:
    from loadgen.adapters.registry import make_sut

    loop = asyncio.get_running_loop()

    async def gate(described: dict[str, Any]) -> int:
        conn.send(("ready", described))
        start_ns: int = await loop.run_in_executor(None, conn.recv)
        return start_ns

    outcome = await run_session(plan, make_sut(spec), share=Share(index, plan.settings.workers),
                                progress=lambda p: conn.send(("progress", p)),
                                log_dir=log_dir, gate=gate)
    conn.send(("done", outcome.tally.encode(), outcome.cpu_s))


def _worker(plan: RunPlan, spec: str, index: int, conn: Connection,
            log_dir: Path | None) -> None:
    """The entry point of one load process."""
    try:
        run_loop(_work(plan, spec, index, conn, log_dir))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        with contextlib.suppress(OSError):  # the parent may have gone
            conn.send(("error", "".join(traceback.format_exception_only(exc)).strip()))
    finally:
        conn.close()


class _Pool:
    """The parent's side: start, release together, gather; any failure ends them all."""

    def __init__(self, plan: RunPlan, spec: str, out_dir: Path | None) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for i in range(plan.settings.workers):
            mine, theirs = ctx.Pipe()
            log_dir = None if out_dir is None else out_dir / WORKERS_DIR / str(i)
            proc = ctx.Process(target=_worker, args=(plan, spec, i, theirs, log_dir),
                               name=f"loadgen-worker-{i}", daemon=True)
            proc.start()
            theirs.close()
            self.conns.append(mine)
            self.procs.append(proc)

    def expect(self, kind: str, timeout_s: float | None,
               progress: Callable[[Progress], None] | None = None) -> list[Any]:
        """Each process's next `kind` message (progress messages are passed on)."""
        got: dict[int, Any] = {}
        latest: dict[int, Progress] = {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while len(got) < len(self.conns):
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            waiting = {id(c): i for i, c in enumerate(self.conns) if i not in got}
            ready = wait([self.conns[i] for i in waiting.values()], left)
            if not ready:
                raise SutError(f"load processes not {kind} after {timeout_s:g} s")
            for ready_conn in ready:
                i = waiting[id(ready_conn)]
                try:
                    what, *body = self.conns[i].recv()
                except EOFError:
                    raise SutError(f"load process {i} died") from None
                if what == "error":
                    raise SutError(f"load process {i} failed: {body[0]}")
                if what == "progress":
                    latest[i] = body[0]
                    if progress is not None and i == 0:
                        progress(_sum_progress(latest.values()))
                elif what == kind:
                    got[i] = body
        return [got[i] for i in range(len(self.conns))]

    def release(self, start_ns: int) -> None:
        """Tell every process the shared start time."""
        for conn in self.conns:
            conn.send(start_ns)

    def interrupt(self) -> None:
        """Pass Ctrl-C on: each process stops issuing, drains and reports."""
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGINT)

    def close(self) -> None:
        """Hang up (a process still waiting sees EOF and exits), then reap them all."""
        for conn in self.conns:
            conn.close()
        for proc in self.procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.terminate()
                proc.join()


def _sum_progress(parts: Any) -> Progress:
    ps = list(parts)
    glances = [p.glance for p in ps if p.glance is not None]
    return Progress(max(p.elapsed_ns for p in ps), sum(p.issued for p in ps),
                    sum(p.finished for p in ps), sum(p.in_flight for p in ps),
                    sum(p.errors for p in ps), merge_glances(glances) if glances else None)


def _merge_logs(out_dir: Path, count: int) -> None:
    """Append the processes' query logs into out_dir/queries.bin, kinds renumbered.

    Streamed a chunk at a time, so memory stays bounded however long the run.
    """
    kinds: dict[str, int] = {"ok": 0}
    step = 1 << 20
    with open(out_dir / BINARY_FILE, "wb") as out:
        for i in range(count):
            part_dir = out_dir / WORKERS_DIR / str(i)
            theirs = json.loads((part_dir / KINDS_FILE).read_text()) if (
                part_dir / KINDS_FILE).exists() else {"ok": 0}
            recode = np.zeros(max(theirs.values()) + 1, dtype=np.int32)
            for kind, code in theirs.items():
                recode[code] = kinds.setdefault(kind, len(kinds))
            with open(part_dir / BINARY_FILE, "rb") as src:
                while chunk := src.read(step * RECORD.itemsize):
                    whole = len(chunk) // RECORD.itemsize * RECORD.itemsize
                    rows = np.frombuffer(chunk[:whole], dtype=RECORD).copy()
                    rows["status"] = recode[rows["status"]]
                    out.write(rows.tobytes())
    (out_dir / KINDS_FILE).write_text(json.dumps(kinds))


def _per_worker(i: int, t: Tally, cpu_s: float) -> dict[str, Any]:
    """One process's figures; a `cpu_share` well below 1 at high rates means it did not
    get a core to itself (the host is busy, or has fewer cores than load processes)."""
    times = t.times
    lag, latency = summary_ns(t.histograms["issue_lag_ns"]), summary_ns(t.histograms["latency_ns"])
    span_s = max((times.issue_end_ns - times.measure_start_ns) / 1e9, 1e-9)
    wall_s = max((times.end_ns - times.start_ns) / 1e9, 1e-9)
    return {"index": i, "queries": t.queries, "errors": sum(t.errors_by_kind.values()),
            "qps_scheduled": lag["count"] / span_s,
            "cpu_s": round(cpu_s, 3), "cpu_share": round(cpu_s / wall_s, 3),
            "issue_lag_ns": {"p50": lag["p50"], "p99": lag["p99"], "max": lag["max"]},
            "latency_ns": {"p50": latency["p50"], "p99": latency["p99"]}}


def run_processes(plan: RunPlan, spec: str, out_dir: Path | None = None,
                  progress: Callable[[Progress], None] | None = None,
                  energy: EnergyMeter | None = None,
                  ) -> tuple[SessionOutcome, dict[str, Any]]:
    """Run one plan from `settings.workers` processes: the merged outcome and `workers`
    (each process's figures, for the result). With `out_dir`, the query logs are merged.
    An `energy` meter runs here, in the parent: its idle baseline once every process's
    SUT is up, its sampling from the shared start until every process is done."""
    count = plan.settings.workers
    pool = _Pool(plan, spec, out_dir)
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: pool.interrupt())
    except ValueError:  # not the main thread: Ctrl-C is someone else's business
        previous = None
    trace = None
    try:
        described = pool.expect("ready", READY_TIMEOUT_S)
        if energy is not None:
            energy.idle()
            energy.start()
        pool.release(time.perf_counter_ns() + START_MARGIN_NS)
        done = pool.expect("done", None, progress)
    finally:
        if energy is not None:
            trace = energy.stop()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        pool.close()
    tallies = [Tally.decode(body[0]) for body in done]
    cpu = [float(body[1]) for body in done]
    if out_dir is not None:
        _merge_logs(out_dir, count)
    workers = {"count": count, "split": "round-robin of the global schedule",
               "per_worker": [_per_worker(i, t, c) for i, (t, c)
                              in enumerate(zip(tallies, cpu, strict=True))]}
    return SessionOutcome(merge_tallies(tallies), described[0][0], None, sum(cpu),
                          trace), workers
