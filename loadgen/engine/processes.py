"""Several load processes on one host, merged into one result.

Each process (spawned, so nothing is shared by accident) builds its own SUT
adapter from the spec string and its own event loop, walks the same global
plan and issues its round-robin share (`schedule.partition`), so together they
issue exactly the single-process schedule. All start at one `perf_counter_ns`
time (CLOCK_MONOTONIC, the same in every process on the host), after every SUT
has started. Each sends back its tally (HDR histograms as V2 text, counters,
windows); the parent merges them exactly and judges the merged run like any
other, adding `workers` with each process's figures.

Query ids are global (process i issues i, i + N, ...); each process's query
log (bin and csv) goes to RUN_DIR/workers/<i>/, and the parent appends them
into RUN_DIR/queries.bin (read it with `querylog.read_binary`).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.record.collect import Collector
from loadgen.errors import SutError
from loadgen.record.querylog import BINARY_FILE, KINDS_FILE, RECORD, QueryLog
from loadgen.record.histograms import summary_ns
from loadgen.engine.runner import Progress, Runner, RunTimes
from loadgen.plan.schedule import describe_schedule, partition, plan_queries
from loadgen.plan.settings import TestSettings
from loadgen.judge.stats import summarize
from loadgen.record.tally import Tally, merge_tallies
from loadgen.judge.verdict import evaluate
from loadgen.record.windows import windows_for

__all__ = ["READY_TIMEOUT_S", "START_MARGIN_NS", "WORKERS_DIR", "run_workers", "workers_warning"]

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


def _collector(settings: TestSettings) -> Collector:
    slo_ns = int(settings.target_latency_ms * 1e6) or 2**62
    return Collector(slo_ns, int(settings.query_timeout_ms * 1e6),
                     windows=windows_for(settings, slo_ns))


async def _work(settings: TestSettings, spec: str, index: int, conn: Connection,
                log_dir: Path | None) -> None:
    from loadgen.adapters.registry import make_sut

    count = settings.workers
    sut = make_sut(spec)
    collector = _collector(settings)
    offsets, samples = partition(plan_queries(settings), index, count)
    runner = Runner(settings, sut, collector, offsets, samples,
                    lambda p: conn.send(("progress", p)), first_id=index, id_step=count)
    collector.on_finish = runner.query_finished
    await sut.start(collector, runner)
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, runner.interrupt)
    runner.plan_ahead()  # before "ready", so planning does not eat the start margin
    gc.collect()
    gc.freeze()  # as in run_async; done before "ready" so the start is not late
    if log_dir is not None:
        collector.log = QueryLog(log_dir)
    conn.send(("ready", sut.describe()))
    start_ns = await loop.run_in_executor(None, conn.recv)
    cpu_s = time.process_time()
    try:
        times = await runner.run(start_at_ns=start_ns)
        cpu_s = time.process_time() - cpu_s
    finally:
        gc.unfreeze()
        if collector.log is not None:
            collector.log.close()
        await sut.stop()
    conn.send(("done", collector.tally().encode(), times, cpu_s))


def _worker(settings: TestSettings, spec: str, index: int, conn: Connection,
            log_dir: Path | None) -> None:
    """The entry point of one load process."""
    from loadgen.api import run_loop

    try:
        run_loop(_work(settings, spec, index, conn, log_dir))
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        with contextlib.suppress(OSError):  # the parent may have gone
            conn.send(("error", "".join(traceback.format_exception_only(exc)).strip()))
    finally:
        conn.close()


class _Pool:
    """The parent's side: start, release together, gather; any failure ends them all."""

    def __init__(self, settings: TestSettings, spec: str, out_dir: Path | None) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conns: list[Connection] = []
        self.procs: list[Any] = []
        for i in range(settings.workers):
            mine, theirs = ctx.Pipe()
            log_dir = None if out_dir is None else out_dir / WORKERS_DIR / str(i)
            proc = ctx.Process(target=_worker, args=(settings, spec, i, theirs, log_dir),
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
    return Progress(max(p.elapsed_ns for p in ps), sum(p.issued for p in ps),
                    sum(p.finished for p in ps), sum(p.in_flight for p in ps),
                    sum(p.errors for p in ps))


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


def _merged_times(times: Sequence[RunTimes]) -> RunTimes:
    return RunTimes(times[0].start_ns, times[0].measure_start_ns,
                    max(t.issue_end_ns for t in times), max(t.end_ns for t in times),
                    any(t.interrupted for t in times), sum(t.unfinished for t in times))


def _per_worker(i: int, t: Tally, times: RunTimes, cpu_s: float) -> dict[str, Any]:
    """One process's figures; a `cpu_share` well below 1 at high rates means it did not
    get a core to itself (the host is busy, or has fewer cores than load processes)."""
    lag, latency = summary_ns(t.histograms["issue_lag_ns"]), summary_ns(t.histograms["latency_ns"])
    span_s = max((times.issue_end_ns - times.measure_start_ns) / 1e9, 1e-9)
    wall_s = max((times.end_ns - times.start_ns) / 1e9, 1e-9)
    return {"index": i, "queries": t.queries, "errors": sum(t.errors_by_kind.values()),
            "qps_scheduled": lag["count"] / span_s,
            "cpu_s": round(cpu_s, 3), "cpu_share": round(cpu_s / wall_s, 3),
            "issue_lag_ns": {"p50": lag["p50"], "p99": lag["p99"], "max": lag["max"]},
            "latency_ns": {"p50": latency["p50"], "p99": latency["p99"]}}


def run_workers(settings: TestSettings, spec: str, out_dir: Path | None = None,
                progress: Callable[[Progress], None] | None = None,
                warnings: Sequence[str] = ()) -> dict[str, Any]:
    """Run one test from `settings.workers` processes; returns (and writes) one result."""
    from loadgen.api import save_run
    from loadgen.report.environment import environment
    from loadgen.report.result import build_result

    pool = _Pool(settings, spec, out_dir)
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: pool.interrupt())
    except ValueError:  # not the main thread: Ctrl-C is someone else's business
        previous = None
    try:
        described = pool.expect("ready", READY_TIMEOUT_S)
        pool.release(time.perf_counter_ns() + START_MARGIN_NS)
        done = pool.expect("done", None, progress)
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        pool.close()
    tallies = [Tally.decode(body[0]) for body in done]
    times = [body[1] for body in done]
    merged, merged_times = merge_tallies(tallies), _merged_times(times)
    stats = summarize(settings, merged, merged_times)
    verdict = evaluate(settings, stats, (), tuple(warnings))
    workers = {"count": settings.workers, "split": "round-robin of the global schedule",
               "per_worker": [_per_worker(i, t, rt, body[2]) for i, (t, rt, body)
                              in enumerate(zip(tallies, times, done, strict=True))]}
    result = build_result(settings, stats, verdict, described[0][0], environment(),
                          {"schedule": describe_schedule(settings), "workers": workers})
    if out_dir is not None:
        _merge_logs(out_dir, settings.workers)
        save_run(settings, result, out_dir)
    return result
