"""The Ray engine: workers as Ray actors spread over a cluster's nodes.

Ray is an optional extra (`pip install 'loadgen[ray]'`), imported only when
this engine starts. Each actor (`LoadWorker`, one CPU reserved, no restarts)
runs a `WorkerCore` on its async loop: it rebuilds the plan's share from the
seed, answers clock pings, and keeps its reports until the driver takes them,
one call at a time (small, returned by value and owned by the driver, so a
worker that dies later loses nothing already taken); a `reports` call waits
(up to `REPORTS_WAIT_S`) until there is something, so the driver blocks on the
calls' futures instead of polling. Releases go out to every actor at once. Workers are spread one
per node (`SPREAD`), or `per_node` to a node on as many nodes as needed.
Every node needs loadgen installed in the same Python as the driver's. The
actor's loop shares its process with Ray's own threads, so it waits for issue
times without the GIL (`release_gil`): a spinning loop and Ray's threads starve
each other (measured here: p99 issue lag 16-118 ms spinning, 1-9 ms releasing).

With a run directory, each actor logs its queries to a scratch directory on its
node and sends the rows written since its last answer with each (a `LOG`
message: whole records and the kinds so far); the driver's handle appends them
to RUN_DIR/workers/<i>/, as a local process writes it, so `merge_logs` merges
both alike. The scratch directory goes once the session's log is closed and sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import pickle
import shutil
import socket
import tempfile
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
from loadgen.errors import SettingsError, SutError
from loadgen.plan.plan import RunPlan
from loadgen.record.querylog import BINARY_FILE, KINDS_FILE, read_kinds, whole_records

__all__ = ["LOCAL_OBJECT_STORE_BYTES", "LOG", "LoadWorker", "RayEngine", "import_ray"]

LOG = "log"
"""A message of query-log rows: {"rows": bytes of whole RECORDs, "kinds": name -> code}."""

LOCAL_OBJECT_STORE_BYTES = 100 << 20  # reports are small; a local instance needs little
REPORTS_WAIT_S = 1.0  # a `reports` call answers at once when there is news, else after this


def import_ray() -> Any:
    """The `ray` module, or a clear error saying how to get it."""
    try:
        import ray
    except ImportError:
        raise SettingsError(["--ray: Ray is not installed; pip install 'loadgen[ray]'"]) from None
    return ray


class LoadWorker:
    """One load worker, as a Ray actor (wrapped with `ray.remote` when the engine starts)."""

    def __init__(self, plan: RunPlan, spec: str, index: int, count: int,
                 log: bool = False) -> None:
        self._queue: list[Message] = []
        self._news: asyncio.Event | None = None  # set when a message is queued
        self._log_dir = Path(tempfile.mkdtemp(prefix="loadgen-querylog-")) if log else None
        self._log_sent = 0  # bytes of the log already sent
        self._core = WorkerCore(plan, spec, index, count, self._log_dir, self._send,
                                release_gil=True)
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._start: asyncio.Future[int] | None = None
        self._task: asyncio.Task[None] | None = None

    def _send(self, kind: str, body: Any) -> int:
        if kind == READY and self._ready is not None and not self._ready.done():
            self._ready.set_result(body)
        else:
            self._queue.append((kind, body))
            if self._news is not None:
                self._news.set()
        return len(pickle.dumps(body))  # about what Ray will carry

    async def prepare(self) -> dict[str, Any]:
        """Start the session; once its SUT is up: the SUT's description and where it runs."""
        import ray

        loop = asyncio.get_running_loop()
        self._news = asyncio.Event()
        self._ready, self._start = loop.create_future(), loop.create_future()
        start = self._start
        self._task = task = loop.create_task(self._core.run(lambda: start))
        ready: asyncio.Future[Any] = self._ready
        await asyncio.wait([ready, task], return_when=asyncio.FIRST_COMPLETED)
        if not self._ready.done():
            self._task.result()  # it failed before its gate: raise that
        return {"described": self._ready.result(), "host": socket.gethostname(),
                "node": ray.get_runtime_context().get_node_id()}

    async def clock(self) -> int:
        """This host's clock now."""
        return time.perf_counter_ns()

    async def release(self, deadline_ns: int) -> None:
        """Start the schedule at `deadline_ns` on this host's clock."""
        assert self._start is not None, "prepare first"
        self._start.set_result(deadline_ns)

    async def reports(self) -> list[Message]:
        """What this worker has to say since the last call (an ERROR if it failed); waits
        up to `REPORTS_WAIT_S` for something to say."""
        task, news = self._task, self._news
        if news is not None and task is not None and not self._queue and not task.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(news.wait(), REPORTS_WAIT_S)
            news.clear()
        ended = task is not None and task.done()  # before the log is read: nothing after
        out, self._queue = self._queue, []
        log = self._log_rows()
        if log is not None:
            out.insert(0, log)
        if ended and self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)
            self._log_dir = None
        if task is not None and task.done() and not task.cancelled() and task.exception():
            exc = task.exception()
            assert exc is not None
            out.append((ERROR, "".join(traceback.format_exception_only(exc)).strip()))
        return out

    def _log_rows(self) -> Message | None:
        """The query log's whole records written since the last call, and its kinds."""
        where = self._log_dir
        if where is None or not (where / BINARY_FILE).exists():
            return None
        with open(where / BINARY_FILE, "rb") as f:
            f.seek(self._log_sent)
            rows = f.read()
        rows = whole_records(rows)
        if not rows:
            return None
        self._log_sent += len(rows)
        return LOG, {"rows": rows, "kinds": read_kinds(where)}

    async def interrupt(self) -> None:
        """Stop issuing now; the session drains and reports."""
        self._core.interrupt()


class _RayWorker:
    """The driver's handle on one actor."""

    def __init__(self, ray: Any, index: int, actor: Any, log_dir: Path | None) -> None:
        self._ray, self.index, self.actor = ray, index, actor
        self.label = f"Ray worker {index}"
        self._log_dir = log_dir  # where its query log rows go, as a local process's would
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
            (log_dir / BINARY_FILE).write_bytes(b"")  # this run's rows only
            (log_dir / KINDS_FILE).unlink(missing_ok=True)
        self._prepared = actor.prepare.remote()
        self._where = Placement("?", "?")
        self._waiting: Any = None
        self._released: Any = None  # the release call, until its answer is taken

    def placement(self) -> Placement:
        return self._where

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        ray = self._ray
        try:
            info = self._call(self._prepared, timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise SutError(f"{self.label} not ready after {timeout_s:g} s") from None
        self._where = Placement(str(info["host"]), str(info["node"]))
        return dict(info["described"])

    def clock(self) -> int:
        return int(self._call(self.actor.clock.remote(), None))

    def release(self, deadline_ns: int) -> None:
        self._released = self.actor.release.remote(deadline_ns)

    def pending(self) -> Any:
        """The `reports` call on its way (one is always on its way)."""
        if self._waiting is None:
            self._waiting = self.actor.reports.remote()
        return self._waiting

    def messages(self) -> list[Message]:
        if self._released is not None:
            released, self._released = self._released, None
            self._call(released, None)
        self.pending()
        done, _ = self._ray.wait([self._waiting], timeout=0)
        if not done:
            return []
        got: list[Message] = self._call(self._waiting, None)
        self._waiting = self.actor.reports.remote()  # the next one is on its way
        for kind, body in got:
            if kind == ERROR:
                raise SutError(f"{self.label} failed: {body}")
            if kind == LOG:
                self._write_log(body)
        return [(kind, body) for kind, body in got if kind != LOG]

    def _write_log(self, body: dict[str, Any]) -> None:
        """Append the rows an actor sent to its query log here; the latest kinds stand."""
        if self._log_dir is None:
            return
        with open(self._log_dir / BINARY_FILE, "ab") as f:
            f.write(body["rows"])
        (self._log_dir / KINDS_FILE).write_text(json.dumps(body["kinds"]))

    def interrupt(self) -> None:
        self.actor.interrupt.remote()

    def _call(self, ref: Any, timeout_s: float | None) -> Any:
        """ray.get, with a dead actor as WorkerLost and a failed call as SutError."""
        ray = self._ray
        try:
            return ray.get(ref, timeout=timeout_s)
        except ray.exceptions.RayActorError as exc:
            raise WorkerLost(f"{self.label} died: {_first_line(exc)}") from None
        except ray.exceptions.RayTaskError as exc:
            raise SutError(f"{self.label} failed: {_first_line(exc.cause or exc)}") from None


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(exc).__name__


class RayEngine:
    """Workers as Ray actors: `address` 'local' (start a Ray instance here), 'auto' (the
    running cluster this host belongs to) or HOST:PORT (join that cluster)."""

    name = "ray"

    def __init__(self, address: str = "local", per_node: int | None = None,
                 num_cpus: float = 1.0) -> None:
        if per_node is not None and per_node < 1:
            raise SettingsError([f"--per-node: must be at least 1, got {per_node}"])
        self.address, self.per_node, self.num_cpus = address, per_node, num_cpus
        self._ray: Any = None
        self._owns = False
        self._actors: list[Any] = []
        self._workers: list[_RayWorker] = []
        self._nodes = 0  # alive when the workers started

    def connect(self) -> Any:
        """Join (or start) the Ray instance; the `ray` module."""
        ray = self._ray = import_ray()
        if not ray.is_initialized():
            local = self.address == "local"
            extra = {"object_store_memory": LOCAL_OBJECT_STORE_BYTES} if local else {}
            ray.init(address=self.address, include_dashboard=False, log_to_driver=False,
                     logging_level="error", **extra)
            self._owns = True
        return ray

    def start(self, plan: RunPlan, spec: str, out_dir: Path | None) -> list[Worker]:
        ray = self.connect()
        self._nodes = sum(1 for n in ray.nodes() if n["Alive"])
        count = plan.settings.workers
        actor = ray.remote(LoadWorker)
        strategies = self._placements(ray, count)
        for i in range(count):
            self._actors.append(actor.options(
                num_cpus=self.num_cpus, max_restarts=0, max_task_retries=0,
                scheduling_strategy=strategies[i],
            ).remote(plan, spec, i, count, out_dir is not None))
        self._workers = [_RayWorker(ray, i, a, None if out_dir is None
                                    else worker_dir(out_dir, i))
                         for i, a in enumerate(self._actors)]
        return list(self._workers)

    def wait(self, workers: Sequence[Worker], timeout_s: float) -> None:
        """Block until the `reports` call of one of `workers` has answered (or `timeout_s`
        passes)."""
        refs = [w.pending() for w in self._workers if w in workers]
        if refs:
            self._ray.wait(refs, num_returns=1, timeout=timeout_s)

    def _placements(self, ray: Any, count: int) -> list[Any]:
        """SPREAD (one per node while nodes last), or `per_node` to each node in turn."""
        if self.per_node is None:
            return ["SPREAD"] * count
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        nodes = [n["NodeID"] for n in ray.nodes()
                 if n["Alive"] and n["Resources"].get("CPU", 0) >= self.num_cpus]
        need = math.ceil(count / self.per_node)
        if need > len(nodes):
            raise SettingsError([(f"--per-node {self.per_node}: {count} workers need {need} "
                                 f"nodes with a free CPU, the cluster has {len(nodes)}")])
        return [NodeAffinitySchedulingStrategy(nodes[i // self.per_node], soft=False)
                for i in range(count)]

    def describe(self) -> dict[str, Any]:
        return {"engine": self.name, "version": getattr(self._ray, "__version__", None),
                "nodes": self._nodes, "address": self.address}

    def key(self) -> dict[str, Any]:
        return {"engine": self.name, "address": self.address, "per_node": self.per_node}

    def close(self) -> None:
        """Kill this run's actors (the Ray connection stays, for the next run)."""
        ray = self._ray
        for a in self._actors:
            with contextlib.suppress(Exception):
                ray.kill(a)
        self._actors, self._workers = [], []

    def shutdown(self) -> None:
        """Leave Ray; stop the Ray instance if this engine started it."""
        if self._ray is not None and self._owns:
            self._ray.shutdown()
            self._owns = False
