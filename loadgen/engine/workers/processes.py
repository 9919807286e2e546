"""The local engine: workers as processes on this host, driven over pipes.

Each process (spawned, so nothing is shared by accident) builds its own SUT
adapter from the spec string and its own event loop, and runs a `WorkerCore`
on its share of the plan. A reader thread answers clock pings and
takes the release; the messages go back on the pipe (written by a thread of
their own, so a large report never holds the issue loop), where the driver waits
on them (`wait`). With `worker_cpus` set, the driver and each process are
pinned to cores (`placement.pin_plan`). Query ids are global;
each process's query log (bin and csv) goes to RUN_DIR/workers/<i>/, and
`merge_logs` appends them into RUN_DIR/queries.bin (`querylog.read_binary`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import queue
import signal
import socket
import threading
import time
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.engine.session import run_loop
from loadgen.engine.workers.base import (
    ERROR,
    READY,
    Message,
    Placement,
    Worker,
    WorkerLost,
    worker_dir,
)
from loadgen.engine.workers.core import WorkerCore
from loadgen.engine.workers.placement import pin_plan
from loadgen.errors import SutError
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import TestSettings
from loadgen.record.querylog import BINARY_FILE, KINDS_FILE, RECORD, read_kinds, whole_records

__all__ = ["LocalProcesses", "OUTBOX_DRAIN_S", "merge_logs", "workers_warning"]

OUTBOX_DRAIN_S = 60.0  # the longest a finished process waits for its last messages to go


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


class _Outbox:
    """A load process's messages to the driver, each pickled once (`conn.send`'s encoding)
    and written whole under one lock. `send` queues it for a thread of its own (the write
    waits without the GIL): a report larger than the pipe's buffer (64 KiB) would otherwise
    hold the issue loop until the driver, which reads its workers one at a time, got to it.
    `send_now` writes on the caller's thread (a clock reply must not wait behind a report)."""

    def __init__(self, conn: Connection) -> None:
        self._conn, self._lock = conn, threading.Lock()
        self._queue: queue.SimpleQueue[memoryview | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._drain, name="loadgen-worker-out",
                                        daemon=True)
        self._thread.start()

    def send(self, kind: str, body: Any) -> int:
        """Queue one message for the writer thread; the bytes it takes on the wire."""
        data = ForkingPickler.dumps((kind, body))
        self._queue.put(data)
        return len(data)

    def send_now(self, kind: str, body: Any) -> int:
        """Write one message at once, on the caller's thread; the bytes it took."""
        data = ForkingPickler.dumps((kind, body))
        self._write(data)
        return len(data)

    def close(self) -> None:
        """Write what is queued, then stop."""
        self._queue.put(None)
        self._thread.join(OUTBOX_DRAIN_S)

    def _drain(self) -> None:
        while (data := self._queue.get()) is not None:
            self._write(data)

    def _write(self, data: memoryview) -> None:
        with self._lock, contextlib.suppress(OSError):  # the parent may have gone
            self._conn.send_bytes(data)


def _child(plan: RunPlan, spec: str, index: int, count: int, conn: Connection,
           log_dir: Path | None, cpus: list[int] | None = None) -> None:
    """The entry point of one load process (pinned to `cpus` when given)."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    hung_up = threading.Event()
    outbox = _Outbox(conn)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        start: asyncio.Future[int] = loop.create_future()

        def read() -> None:  # pings answered here, so a busy loop never delays them
            try:
                while True:
                    what, *body = conn.recv()
                    if what == "ping":
                        outbox.send_now("pong", time.perf_counter_ns())
                    elif what == "release":
                        loop.call_soon_threadsafe(start.set_result, int(body[0]))
            except (EOFError, OSError):
                hung_up.set()

        threading.Thread(target=read, name="loadgen-worker-pipe", daemon=True).start()
        await WorkerCore(plan, spec, index, count, log_dir, outbox.send).run(lambda: start)

    try:
        run_loop(main())
        outbox.close()
        hung_up.wait()  # stay to answer the driver's last pings, until it hangs up
    except BaseException as exc:  # noqa: BLE001 - reported to the parent, which raises
        outbox.send_now(ERROR, "".join(traceback.format_exception_only(exc)).strip())
    finally:
        conn.close()


class _Process:
    """The driver's handle on one load process."""

    def __init__(self, index: int, conn: Connection, proc: Any) -> None:
        self.index, self.label = index, f"load process {index}"
        self.conn, self.proc = conn, proc
        self.pending: list[Message] = []
        self._lock = threading.Lock()

    def placement(self) -> Placement:
        return Placement(socket.gethostname(), "local")

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            for kind, body in self._receive(max(deadline - time.monotonic(), 0.0)):
                if kind == READY:
                    return dict(body)
                self.pending.append((kind, body))
            if time.monotonic() >= deadline:
                raise SutError(f"{self.label} not ready after {timeout_s:g} s")

    def clock(self) -> int:
        with self._lock:
            self.conn.send(("ping",))
        while True:
            for kind, body in self._receive(None):
                if kind == "pong":
                    return int(body)
                self.pending.append((kind, body))

    def release(self, deadline_ns: int) -> None:
        with self._lock:
            self.conn.send(("release", deadline_ns))

    def messages(self) -> list[Message]:
        got, self.pending = self.pending + self._receive(0.0), []
        return got

    def interrupt(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGINT)

    def _receive(self, timeout_s: float | None) -> list[Message]:
        """Whatever is on the pipe (waiting up to `timeout_s` for the first message)."""
        out: list[Message] = []
        try:
            while self.conn.poll(timeout_s if not out else 0.0):
                kind, body = self.conn.recv()
                if kind == ERROR:
                    raise SutError(f"{self.label} failed: {body}")
                out.append((kind, body))
        except (EOFError, OSError):
            raise WorkerLost(f"{self.label} died (exit code {self.proc.exitcode})") from None
        return out


class LocalProcesses:
    """Workers as spawned processes on this host."""

    name = "processes"

    def __init__(self) -> None:
        self._procs: list[_Process] = []
        self._driver_cpus: set[int] | None = None  # the driver's cores before pinning

    def start(self, plan: RunPlan, spec: str, out_dir: Path | None) -> list[Worker]:
        ctx = multiprocessing.get_context("spawn")
        count = plan.settings.workers
        self._procs = []  # an engine runs one run at a time, and may run many
        pins = pin_plan(plan.settings.worker_cpus, count)
        if pins is not None:
            self._driver_cpus = os.sched_getaffinity(0)
            os.sched_setaffinity(0, pins.driver)
        for i in range(count):
            mine, theirs = ctx.Pipe()
            log_dir = None if out_dir is None else worker_dir(out_dir, i)
            cpus = None if pins is None else pins.workers[i]
            proc = ctx.Process(target=_child, args=(plan, spec, i, count, theirs, log_dir, cpus),
                               name=f"loadgen-worker-{i}", daemon=True)
            proc.start()
            theirs.close()
            self._procs.append(_Process(i, mine, proc))
        return list(self._procs)

    def wait(self, workers: Sequence[Worker], timeout_s: float) -> None:
        """Block until one of `workers` has sent something (or `timeout_s` passes)."""
        mine = [p for p in self._procs if p in workers]
        if any(p.pending for p in mine):
            return
        with contextlib.suppress(OSError):  # a closed pipe shows in `messages`
            wait([p.conn for p in mine if not p.conn.closed], timeout_s)

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "version": None, "nodes": 1}

    def key(self) -> dict[str, Any]:
        return {"engine": self.name}

    def close(self) -> None:
        """Hang up (a process still waiting sees EOF and exits), then reap them all; the
        driver gets its cores back."""
        if self._driver_cpus is not None:
            os.sched_setaffinity(0, self._driver_cpus)
            self._driver_cpus = None
        for p in self._procs:
            p.conn.close()
        for p in self._procs:
            p.proc.join(timeout=5)
            if p.proc.is_alive():
                p.proc.terminate()
                p.proc.join()


def merge_logs(out_dir: Path, count: int) -> None:
    """Append the processes' query logs into out_dir/queries.bin, kinds renumbered.

    Streamed a chunk at a time, so memory stays bounded however long the run.
    """
    kinds: dict[str, int] = {"ok": 0}
    step = 1 << 20
    with open(out_dir / BINARY_FILE, "wb") as out:
        for i in range(count):
            part_dir = worker_dir(out_dir, i)
            if not (part_dir / BINARY_FILE).exists():
                continue  # a worker lost before it logged
            theirs = read_kinds(part_dir)
            recode = np.zeros(max(theirs.values()) + 1, dtype=np.int32)
            for kind, code in theirs.items():
                recode[code] = kinds.setdefault(kind, len(kinds))
            with open(part_dir / BINARY_FILE, "rb") as src:
                while chunk := src.read(step * RECORD.itemsize):
                    rows = np.frombuffer(whole_records(chunk), dtype=RECORD).copy()
                    rows["status"] = recode[rows["status"]]
                    out.write(rows.tobytes())
    (out_dir / KINDS_FILE).write_text(json.dumps(kinds))
