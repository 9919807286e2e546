"""Workers: device choice, precision, and threads that run batches.

`instances` workers per visible CUDA device (default 1: on an H100, a second
instance's Python contends for the GIL and lowered throughput in 3 of 4 cases,
`benchmarks/batching.py --variants graphs-1,graphs-2`; workers on one device share
one copy of the weights); on the CPU, `instances` workers (default
min(2, cores)), each with its own intra-op thread count so that workers x
threads <= cores. Worker threads run under `torch.inference_mode()`.

`Executor` is the serial path (`pipelined=false`; the CPU's default): one thread
per worker stages, launches and waits for each batch in turn. On CUDA it stages
in pinned host buffers, copies with `non_blocking=True` on the worker's own
`torch.cuda.Stream`, and times H2D / compute / D2H with CUDA events, read after
the stream is synchronised; with samples on the device (`sut.devicedata`) a batch of
sample indices is joined and copied instead (`IndexBuffers`, as a pipeline slot does)
and its rows gathered there. The pipelined path is
`sut.pipeline`. CPU path: inputs are joined into fresh memory (h2d), the forward pass and
the outputs' conversion to numpy (d2h) timed with `time.perf_counter_ns()`.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oipwire.datatypes import TensorSpec
from oipwire.timing import COMPUTE, D2H, H2D
from sut.devicedata import SAMPLE_INDEX, DeviceSamples, IndexBuffers
from sut.errors import ConfigError, ModelLoadError
from sut.forward import PRECISIONS, Forward
from sut.staging import Lent, host_buffer, stage

__all__ = [
    "PRECISIONS",
    "Executor",
    "Placement",
    "WorkerPlan",
    "WorkerPool",
    "cpu_cores",
    "place",
    "plan_workers",
    "resolve_precision",
]

_log = logging.getLogger(__name__)


def cpu_cores() -> int:
    """Cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


@dataclass(frozen=True, slots=True)
class WorkerPlan:
    """Where each worker runs and how many intra-op threads it uses."""

    devices: tuple[str, ...]  # one per worker
    threads_per_worker: int


def plan_workers(
    device: str,
    *,
    instances: int | None = None,
    workers: int | None = None,
    threads: int | None = None,
    cores: int,
    cuda_count: int,
) -> WorkerPlan:
    """Resolve `device` (cpu | cuda | cuda:N | auto) and counts; ConfigError when impossible.

    `instances` counts workers per device; `workers` (exclusive with it) counts them
    in all, spread round-robin over the devices.
    """
    if device == "auto":
        device = "cuda" if cuda_count else "cpu"
    if device == "cpu":
        targets = ["cpu"]
    elif device == "cuda":
        targets = [f"cuda:{i}" for i in range(cuda_count)]
    elif device.startswith("cuda:") and device[5:].isdigit():
        targets = [device] if int(device[5:]) < cuda_count else []
    else:
        raise ConfigError("device", f"want cpu, cuda, cuda:N or auto, got {device!r}")
    if not targets:
        raise ConfigError("device", f"{device!r} asked for, but {cuda_count} CUDA devices visible")
    on_cpu = targets == ["cpu"]
    if instances is not None and workers is not None:
        raise ConfigError("workers", "give workers (in all) or instances (per device), not both")
    for key, value in (("instances", instances), ("workers", workers), ("threads", threads)):
        if value is not None and value < 1:
            raise ConfigError(key, f"must be >= 1, got {value}")
    if workers is None:
        per_device = instances if instances is not None else (min(2, cores) if on_cpu else 1)
        workers = per_device * len(targets)
    placed = tuple(targets[i % len(targets)] for i in range(workers))
    per_worker = threads if threads is not None else max(1, cores // workers)
    if on_cpu and workers * per_worker > cores:
        raise ConfigError(
            "threads" if threads is not None else "workers",
            f"{workers} workers x {per_worker} threads exceed {cores} cores",
        )
    return WorkerPlan(placed, per_worker)


def resolve_precision(requested: str, device: torch.device, cuda_bf16: bool) -> str:
    """The precision actually used: fp16 falls back to fp32 on the CPU, bf16 without support."""
    if requested not in PRECISIONS:
        raise ConfigError("precision", f"want one of {', '.join(PRECISIONS)}, got {requested!r}")
    if device.type == "cpu" and requested == "fp16":
        return "fp32"
    if device.type == "cuda" and requested == "bf16" and not cuda_bf16:
        return "fp32"
    return requested


@dataclass(frozen=True, slots=True)
class Placement:
    """Model copies by device, the precision they run at, and the first inference's time."""

    copies: dict[str, torch.nn.Module]
    precision: str
    note: str  # why `precision` is not the one asked for; empty when it is
    first_inference_ns: int


def place(
    module: torch.nn.Module,
    devices: Sequence[str],
    requested: str,
    inputs: tuple[TensorSpec, ...],
    outputs: tuple[TensorSpec, ...],
    sample: dict[str, np.ndarray],
) -> Placement:
    """Copy `module` to each device at the best supported precision, and time one inference.

    Devices are all CPU or all CUDA. When the first inference fails at a reduced
    precision, the copies are redone in fp32 and the reason is kept in `note`.
    """
    cuda_bf16 = torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    precision = resolve_precision(requested, torch.device(devices[0]), cuda_bf16)
    note = "" if precision == requested else f"{requested} unsupported on {devices[0]}; fp32 used"
    copies = _copies(module, devices, precision)
    try:
        return Placement(copies, precision, note,
                         _time_one(copies, devices[0], precision, inputs, outputs, sample))
    except Exception as exc:
        if precision == "fp32":
            raise ModelLoadError(f"the first inference failed: {exc!r}") from exc
        note = f"{precision} failed on the first inference ({exc!r}); fp32 used"
    copies = _copies(module, devices, "fp32")
    return Placement(copies, "fp32", note,
                     _time_one(copies, devices[0], "fp32", inputs, outputs, sample))


def _copies(module: torch.nn.Module, devices: Sequence[str], precision: str
            ) -> dict[str, torch.nn.Module]:
    """One copy per device (the CPU in fp32 shares `module`); `.to` casts floats only."""
    copies = {}
    for device in devices:
        shared = device == "cpu" and precision == "fp32"
        placed = module if shared else copy.deepcopy(module)
        copies[device] = placed.to(device=torch.device(device), dtype=PRECISIONS[precision])
        if device != "cpu":
            torch.cuda.synchronize(device)
    return copies


def _time_one(copies: dict[str, torch.nn.Module], device: str, precision: str,
              inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...],
              sample: dict[str, np.ndarray]) -> int:
    executor = Executor(copies[device], torch.device(device), precision, inputs, outputs)
    began = time.perf_counter_ns()
    with torch.inference_mode():
        executor.run({k: [v] for k, v in sample.items()}, 1)
    return time.perf_counter_ns() - began


class Executor:
    """Runs batches of one model copy on one device; one per worker, not thread-safe."""

    def __init__(
        self,
        model: torch.nn.Module,
        device: torch.device,
        precision: str,
        inputs: tuple[TensorSpec, ...],
        outputs: tuple[TensorSpec, ...],
        samples: DeviceSamples | None = None,
    ) -> None:
        """`samples`: the dataset on this (CUDA) device, when batches may come as indices."""
        self.device = device
        self._samples = samples
        self.precision = precision
        self._forward = Forward(model, precision, outputs)
        self._inputs = inputs
        self._cuda = device.type == "cuda"
        self._staging: dict[str, torch.Tensor] = {}
        self._index = IndexBuffers(device, pinned=self._cuda)  # a batch of sample indices
        self._landing: list[torch.Tensor | None] = []
        if self._cuda:
            self._stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
            self._events = [
                torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                for _ in range(4)
            ]

    def run(
        self, parts: dict[str, list[np.ndarray]], rows: int, lent: Lent | None = None
    ) -> tuple[list[np.ndarray], dict[str, int]]:
        """Outputs (owned by the caller, in spec order) and h2d/compute/d2h durations in ns.
        `lent`: the block the batch's one request was gathered into; it is used as it is."""
        start = time.perf_counter_ns()
        if self._cuda and self._samples is not None and SAMPLE_INDEX in (
                parts if lent is None else lent.tensors):
            index = self._index.join(parts.get(SAMPLE_INDEX, []), rows, lent)
            return self._run_cuda([index], start, self._samples)
        if self._cuda:
            staged = ([lent.tensors[s.name] for s in self._inputs] if lent is not None
                      else [self._stage(s, parts[s.name], rows) for s in self._inputs])
            return self._run_cuda(staged, start)
        # CPU: each batch gets fresh input memory (one copy, as a staging buffer would cost),
        # or is a lent block, so outputs that alias it stay the caller's (an output that may
        # share the block's memory is copied: the block is lent again) and a model writing
        # its inputs in place cannot touch the requests' arrays.
        staged = ([lent.tensors[s.name] for s in self._inputs] if lent is not None
                  else [torch.from_numpy(_joined(parts[s.name])) for s in self._inputs])
        staged_ns = time.perf_counter_ns()
        results = self._forward(staged)
        computed_ns = time.perf_counter_ns()
        arrays = [t.numpy() for t in results]
        if lent is not None:
            arrays = [_own(a, lent) for a in arrays]
        end = time.perf_counter_ns()
        return arrays, {H2D: staged_ns - start, COMPUTE: computed_ns - staged_ns,
                        D2H: end - computed_ns}

    def _run_cuda(
        self, staged: list[torch.Tensor], start: int, samples: DeviceSamples | None = None
    ) -> tuple[list[np.ndarray], dict[str, int]]:
        """`staged`: the batch's inputs on the host, or its sample indices (with `samples`)."""
        staged_ns = time.perf_counter_ns()
        ev = self._events
        with torch.cuda.stream(self._stream):
            ev[0].record(self._stream)
            if samples is not None:
                on_device = samples.select(self._index.send(staged[0]))
            else:
                on_device = [t.to(self.device, non_blocking=True) for t in staged]
            ev[1].record(self._stream)
            results = self._forward(on_device)
            ev[2].record(self._stream)
            landed = [self._land(i, t).copy_(t, non_blocking=True) for i, t in enumerate(results)]
            ev[3].record(self._stream)
        self._stream.synchronize()
        copied_ns = time.perf_counter_ns()
        arrays = [t.numpy().copy() for t in landed]  # landing buffers are reused
        h2d, compute, d2h = (round(ev[i].elapsed_time(ev[i + 1]) * 1e6) for i in range(3))
        return arrays, {H2D: staged_ns - start + h2d, COMPUTE: compute,
                        D2H: d2h + time.perf_counter_ns() - copied_ns}

    def _stage(self, spec: TensorSpec, parts: list[np.ndarray], rows: int) -> torch.Tensor:
        """Join a batch into a reused pinned host buffer, for the copy to the GPU."""
        self._staging[spec.name] = buf = stage(self._staging.get(spec.name), parts, rows,
                                               pinned=True)
        return buf[:rows]

    def _land(self, index: int, result: torch.Tensor) -> torch.Tensor:
        """A reused pinned host buffer shaped for a device result."""
        if index == len(self._landing):
            self._landing.append(None)
        rows = result.shape[0]
        self._landing[index] = buf = host_buffer(self._landing[index], rows, result.shape[1:],
                                                 result.dtype, pinned=True)
        return buf[:rows]


def _own(array: np.ndarray, lent: Lent) -> np.ndarray:
    """`array`, or a copy of it when it may share memory with the lent block."""
    if any(np.may_share_memory(array, block) for block in lent.arrays.values()):
        return array.copy()
    return array


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The parts' rows in one new array."""
    return parts[0].copy() if len(parts) == 1 else np.concatenate(parts, axis=0)


class WorkerPool:
    """Threads, one per executor, that each take their next batch and run `handle` on it."""

    def __init__(
        self,
        executors: Sequence[Executor],
        threads_per_worker: int,
        next_batch: Callable[[], Any],
        handle: Callable[[Executor, Any], None],
    ) -> None:
        self._threads_per_worker = threads_per_worker
        self._next_batch = next_batch
        self._handle = handle
        self._threads = [
            threading.Thread(target=self._work, args=(ex,), name=f"sut-worker-{i}", daemon=True)
            for i, ex in enumerate(executors)
        ]

    def start(self) -> None:
        """Start every worker thread."""
        for thread in self._threads:
            thread.start()

    def join(self) -> None:
        """Wait for every worker to end (once `next_batch` has returned None to each)."""
        for thread in self._threads:
            thread.join()

    def _work(self, executor: Executor) -> None:
        if executor.device.type == "cuda":
            torch.cuda.set_device(executor.device)
        torch.set_num_threads(self._threads_per_worker)
        with torch.inference_mode():
            while (batch := self._next_batch()) is not None:
                try:
                    self._handle(executor, batch)
                except Exception:  # noqa: BLE001 - handle fails its own requests; last resort
                    _log.exception("worker failed on a batch")
