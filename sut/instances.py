"""A service's model instances: serial workers, or pipelines (with CUDA graphs on CUDA).

    pipelined=false   `WorkerPool` of `Executor`s: one thread per instance, in series
                      (the CPU's default)
    pipelined=true    a `Pipeline` per instance over a ring of slots (CUDA's default):
                      `CudaLauncher` on CUDA, `HostLauncher` on the CPU; one thread, or
                      an issue and a completion thread (`completion_thread=true`)
    cuda_graphs=true  (CUDA's default) each CUDA pipeline replays CUDA graphs per
                      batch-size bucket, captured at load, one set per ring slot;
                      eager when capture fails, with the reason in `note`
    samples           (start_from_device) the dataset on each device: every path takes
                      batches of sample indices too, lent in `index_pool`'s blocks; graphs
                      are captured with static inputs in the samples' dtypes

`describe()` names the path that runs, for the summary and result.json.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oipwire.datatypes import TensorSpec
from sut.cudalaunch import CudaLauncher
from sut.devicedata import INDEX_SPEC, DeviceSamples
from sut.forward import Forward
from sut.graphs import GraphError, GraphSet
from sut.hostlaunch import HostLauncher
from sut.pipeline import Launcher, Pipeline
from sut.staging import PinnedPool
from sut.workers import Executor, WorkerPool

__all__ = ["RING_SLOTS", "ExecutorChoice", "Instances", "choose"]

_log = logging.getLogger(__name__)
RING_SLOTS = 3


@dataclass(frozen=True, slots=True)
class ExecutorChoice:
    """Which path runs: pipelined or serial, graphs or eager (None: the device's default)."""

    pipelined: bool
    cuda_graphs: bool
    completion_thread: bool = False


def choose(cuda: bool, pipelined: bool | None, cuda_graphs: bool | None,
           completion_thread: bool = False) -> ExecutorChoice:
    """The path for a device: on CUDA pipelined with graphs, on the CPU serial, by default.
    Graphs need the pipeline and CUDA; asked for elsewhere they are off."""
    run_pipelined = cuda if pipelined is None else pipelined
    graphs = cuda if cuda_graphs is None else cuda_graphs
    return ExecutorChoice(run_pipelined, graphs and cuda and run_pipelined,
                          completion_thread and run_pipelined)


class Instances:
    """The running instances of one model; start, then join once the batcher closed."""

    def __init__(self, copies: dict[str, torch.nn.Module], devices: Sequence[str],
                 precision: str, inputs: tuple[TensorSpec, ...],
                 outputs: tuple[TensorSpec, ...], choice: ExecutorChoice, threads: int,
                 max_rows: int, sample: Sequence[np.ndarray],
                 samples: Mapping[str, DeviceSamples] | None = None) -> None:
        """`samples`: the dataset on each device (start_from_device), or None."""
        self.choice = choice
        self.note = ""
        self.buckets: tuple[int, ...] = ()
        self._devices = tuple(devices)
        self._cuda = self._devices[0].startswith("cuda")
        self._threads = threads
        # blocks lent to callers (pinned on CUDA): their inputs are gathered into one and
        # read from there, on every path
        self.pool = PinnedPool(inputs, max_rows, limit=4 * RING_SLOTS * len(devices),
                               pinned=self._cuda, precision=precision)
        # blocks of sample indices, when the samples are on the device
        self.index_pool = (PinnedPool([INDEX_SPEC], max_rows, limit=4 * RING_SLOTS * len(devices),
                                      pinned=self._cuda) if samples else None)
        on = dict(samples or {})
        self._executors: list[Executor] = []
        self.launchers: list[Launcher] = []
        self._running: list[Pipeline] | WorkerPool | None = None
        if not choice.pipelined:
            self._executors = [Executor(copies[d], torch.device(d), precision, inputs, outputs,
                                        on.get(d)) for d in devices]
            return
        for device in devices:
            forward = Forward(copies[device], precision, outputs)
            if not self._cuda:
                self.launchers.append(HostLauncher(forward, inputs, RING_SLOTS))
                continue
            held = on.get(device)
            graphs = self._capture(forward, torch.device(device), sample, max_rows,
                                   held.dtypes if held is not None else ())
            self.launchers.append(CudaLauncher(forward, torch.device(device), inputs, outputs,
                                               RING_SLOTS, graphs, held))

    def _capture(self, forward: Forward, device: torch.device, sample: Sequence[np.ndarray],
                 max_rows: int, dtypes: Sequence[torch.dtype]) -> list[GraphSet]:
        """One captured set per ring slot (each with its own static buffers), or none."""
        if not self.choice.cuda_graphs or self.note:
            return []
        try:
            graphs = [GraphSet.capture(forward, device, sample, max_rows, dtypes)
                      for _ in range(RING_SLOTS)]
        except GraphError as exc:
            self.note = f"CUDA graphs off, eager used: {exc}"
            _log.warning("%s", self.note)
            return []
        self.buckets = graphs[0].buckets
        return graphs

    @property
    def in_flight(self) -> int:
        """Batches that may run at once: every slot of every ring (one per serial worker)."""
        return sum(x.slots for x in self.launchers) or len(self._executors)

    def describe(self) -> dict[str, Any]:
        """The executor path, for the summary and result.json's `sut` block."""
        graphs = bool(self.buckets)
        per_device = len(self._devices) // len(set(self._devices))
        threads = ("issue and completion threads" if self.choice.completion_thread
                   else "one thread")
        path = (f"pipelined ({RING_SLOTS}-slot ring, {threads})" if self.choice.pipelined
                else "serial")
        mode = (f"CUDA graphs (buckets {self.buckets[0]}-{self.buckets[-1]})" if graphs
                else "eager")
        return {"executor": f"{path}, {mode}, {per_device} per device",
                "pipelined": self.choice.pipelined, "cuda_graphs": graphs,
                "in_flight": self.in_flight,
                "executor_note": self.note or None}

    def start(self, next_batch: Callable[[], Any], try_batch: Callable[[], Any],
              run_serial: Callable[[Executor, Any], None],
              deliver: Callable[[Any, list[np.ndarray], dict[str, int]], None],
              fail: Callable[[Any, BaseException], None]) -> None:
        """Start every instance's threads, taking batches from `next_batch`."""
        if not self.choice.pipelined:
            pool = WorkerPool(self._executors, self._threads, next_batch, run_serial)
            self._running = pool
            pool.start()
            return
        pipelines = [Pipeline(launcher, next_batch, try_batch, deliver, fail,
                              f"sut-instance-{i}", self._threads,
                              self.choice.completion_thread)
                     for i, launcher in enumerate(self.launchers)]
        self._running = pipelines
        for pipeline in pipelines:
            pipeline.start()

    def join(self) -> None:
        """Wait for every thread to end (after the batcher closed); drains what was launched."""
        running = self._running
        if isinstance(running, WorkerPool):
            running.join()
        elif running is not None:
            for pipeline in running:
                pipeline.join()
