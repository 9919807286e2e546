"""The Ray engine: workers as Ray actors spread over a cluster's nodes.

Ray is an optional extra (`pip install 'loadgen[ray]'`), imported only when
this engine starts. Each actor (`LoadWorker`, one CPU reserved, no restarts)
runs a `WorkerCore` on its async loop: it rebuilds the plan's share from the
seed, answers clock pings, and keeps its reports until the driver takes them,
one call at a time (small, returned by value and owned by the driver, so a
worker that dies later loses nothing already taken). Workers are spread one
per node (`SPREAD`), or `per_node` to a node on as many nodes as needed.
Every node needs loadgen installed in the same Python as the driver's. The
actor's loop shares its process with Ray's own threads, so it waits for issue
times without the GIL (`release_gil`): a spinning loop and Ray's threads starve
each other (measured here: p99 issue lag 16-118 ms spinning, 1-9 ms releasing).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from loadgen.engine.workers.base import ERROR, READY, Message, Placement, Worker, WorkerLost
from loadgen.engine.workers.core import WorkerCore
from loadgen.errors import SettingsError, SutError
from loadgen.plan.plan import RunPlan

__all__ = ["LOCAL_OBJECT_STORE_BYTES", "LoadWorker", "RayEngine", "import_ray"]

LOCAL_OBJECT_STORE_BYTES = 100 << 20  # reports are small; a local instance needs little


def import_ray() -> Any:
    """The `ray` module, or a clear error saying how to get it."""
    try:
        import ray
    except ImportError:
        raise SettingsError(["--ray: Ray is not installed; pip install 'loadgen[ray]'"]) from None
    return ray


class LoadWorker:
    """One load worker, as a Ray actor (wrapped with `ray.remote` when the engine starts)."""

    def __init__(self, plan: RunPlan, spec: str, index: int, count: int) -> None:
        self._queue: list[Message] = []
        self._core = WorkerCore(plan, spec, index, count, None, self._send, release_gil=True)
        self._ready: asyncio.Future[dict[str, Any]] | None = None
        self._start: asyncio.Future[int] | None = None
        self._task: asyncio.Task[None] | None = None

    def _send(self, kind: str, body: Any) -> None:
        if kind == READY and self._ready is not None and not self._ready.done():
            self._ready.set_result(body)
        else:
            self._queue.append((kind, body))

    async def prepare(self) -> dict[str, Any]:
        """Start the session; once its SUT is up: the SUT's description and where it runs."""
        import ray

        loop = asyncio.get_running_loop()
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
        """What this worker has to say since the last call (an ERROR if it failed)."""
        out, self._queue = self._queue, []
        task = self._task
        if task is not None and task.done() and not task.cancelled() and task.exception():
            exc = task.exception()
            assert exc is not None
            out.append((ERROR, "".join(traceback.format_exception_only(exc)).strip()))
        return out

    async def interrupt(self) -> None:
        """Stop issuing now; the session drains and reports."""
        self._core.interrupt()


class _RayWorker:
    """The driver's handle on one actor."""

    def __init__(self, ray: Any, index: int, actor: Any) -> None:
        self._ray, self.index, self.actor = ray, index, actor
        self.label = f"Ray worker {index}"
        self._prepared = actor.prepare.remote()
        self._where = Placement("?", "?")
        self._waiting: Any = None

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
        self._call(self.actor.release.remote(deadline_ns), None)

    def messages(self) -> list[Message]:
        if self._waiting is None:
            self._waiting = self.actor.reports.remote()
        done, _ = self._ray.wait([self._waiting], timeout=0)
        if not done:
            return []
        got: list[Message] = self._call(self._waiting, None)
        self._waiting = self.actor.reports.remote()  # the next one is on its way
        for kind, body in got:
            if kind == ERROR:
                raise SutError(f"{self.label} failed: {body}")
        return [(kind, body) for kind, body in got]

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
    poll_s = 0.2

    def __init__(self, address: str = "local", per_node: int | None = None,
                 num_cpus: float = 1.0) -> None:
        if per_node is not None and per_node < 1:
            raise SettingsError([f"--per-node: must be at least 1, got {per_node}"])
        self.address, self.per_node, self.num_cpus = address, per_node, num_cpus
        self._ray: Any = None
        self._owns = False
        self._actors: list[Any] = []
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
            ).remote(plan, spec, i, count))
        return [_RayWorker(ray, i, a) for i, a in enumerate(self._actors)]

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
        self._actors = []

    def shutdown(self) -> None:
        """Leave Ray; stop the Ray instance if this engine started it."""
        if self._ray is not None and self._owns:
            self._ray.shutdown()
            self._owns = False
