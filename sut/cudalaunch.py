"""The pipeline's device work on CUDA: three streams, a ring of slots, events for timing.

Each slot owns a pinned host input, a device input, a pinned landing buffer, six timing
events and, with CUDA graphs, its own captured `GraphSet` (one per slot: the slots' static
buffers never alias, so one slot's D2H never races another's replay). A launch queues,
without waiting: H2D on the h2d stream (straight into the slot's static inputs of the
batch's bucket when a graph runs it; rows of another floating dtype than the static
inputs, which hold the lent blocks' dtype (`block_dtype`), land in the slot's device
input and are cast into them on the device); compute on the compute stream once the H2D
event has fired (the bucket's graph replay, or the eager forward); D2H on the d2h stream
once compute has (straight from the static outputs). H2D and D2H have a stream each: on
one copy stream, the next batch's H2D would queue behind this batch's D2H, which waits
for its compute, and copies would never overlap compute. A slot is launched again only
after `finish` saw its last event, so none of its buffers is written while the device
still reads it.

With samples on the device (`sut.devicedata`), a batch of sample indices is launched the
same way, but what the h2d stream queues is the indices' copy into the slot's device
index buffer and a gather (`index_select`) of the rows into the same static inputs (or
the slot's eager inputs): h2d then times the indices' copy and the gather.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from oipwire.datatypes import TensorSpec
from oipwire.timing import COMPUTE, D2H, H2D
from sut.devicedata import SAMPLE_INDEX, DeviceSamples, IndexBuffers
from sut.forward import Forward
from sut.graphs import GraphSet
from sut.staging import held_apart, host_buffer, request_parts, stage

__all__ = ["CudaLauncher"]

_MS = 1_000_000  # ns per ms (CUDA events measure ms)


def _first(tensor: torch.Tensor, rows: int) -> torch.Tensor:
    """The first `rows` rows of `tensor` (itself when it has no more: slicing costs)."""
    return tensor if tensor.shape[0] == rows else tensor[:rows]


def _device_buffer(current: torch.Tensor | None, rows: int, like: torch.Tensor,
                   device: torch.device) -> torch.Tensor:
    if (current is not None and current.shape[0] >= rows and current.dtype == like.dtype
            and current.shape[1:] == like.shape[1:]):
        return current
    return torch.empty((rows, *like.shape[1:]), dtype=like.dtype, device=device)


class _Slot:
    """One batch's buffers and events; reused batch after batch."""

    def __init__(self, inputs: int, outputs: int, device: torch.device) -> None:
        self.host_in: list[torch.Tensor | None] = [None] * inputs
        self.dev_in: list[torch.Tensor | None] = [None] * inputs
        self.landing: list[torch.Tensor | None] = [None] * outputs
        self.landed: list[np.ndarray | None] = [None] * outputs  # numpy views of `landing`
        self.events = [torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
                       for _ in range(6)]
        self.rows = 0
        self.staged_ns = 0
        self.eager: list[torch.Tensor] = []  # eager outputs, alive until their D2H is done
        self.index = IndexBuffers(device, pinned=True)  # a batch of sample indices


class CudaLauncher:
    """The `Launcher` of one instance on one CUDA device (see the module docstring)."""

    def __init__(self, forward: Forward, device: torch.device,
                 inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...],
                 slots: int = 3, graphs: Sequence[GraphSet] = (),
                 samples: DeviceSamples | None = None) -> None:
        """`graphs`: one captured set per slot, or none (eager); `samples`: the dataset on
        this device, when batches may come as sample indices."""
        if graphs and len(graphs) != slots:
            raise ValueError(f"want one GraphSet per slot ({slots}), got {len(graphs)}")
        self.device = device
        self.graphs = tuple(graphs)
        self._forward = forward
        self._apart = held_apart(inputs, forward.precision)  # inputs lent in another dtype
        self._names = tuple(s.name for s in inputs)
        self.samples = samples
        # whether a batch of indices is gathered straight into the graphs' static inputs
        self._graph_gather = bool(graphs) and samples is not None and samples.fits(
            graphs[0].static_inputs(graphs[0].buckets[-1]))
        with torch.cuda.device(device):
            self._h2d = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
            self._compute = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
            self._d2h = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
            self._default = torch.cuda.default_stream(device)
            self._slots = [_Slot(len(inputs), len(outputs), device) for _ in range(slots)]

    @property
    def slots(self) -> int:
        """The ring's length."""
        return len(self._slots)

    @property
    def streams(self) -> tuple[torch.cuda.Stream, ...]:
        """The h2d, compute and d2h streams, in that order."""
        return self._h2d, self._compute, self._d2h

    def bind_thread(self) -> None:
        """Make this launcher's device the calling thread's."""
        torch.cuda.set_device(self.device)

    def launch(self, slot: int, batch: Any) -> None:
        """Stage the batch (or take its lent pinned block as it is) and queue its work."""
        began = time.perf_counter_ns()
        s = self._slots[slot]
        rows, requests = batch.rows, batch.requests
        samples = self.samples if SAMPLE_INDEX in requests[0].inputs else None
        lent = requests[0].lent if len(requests) == 1 else None
        sources = []
        host_index = (s.index.join([r.inputs[SAMPLE_INDEX] for r in requests], rows, lent)
                      if samples is not None else None)
        for i, name in enumerate(() if samples is not None else self._names):
            if lent is not None:
                sources.append(lent.tensors[name])  # the request's rows: the batch's
            else:
                parts = request_parts(requests, name, self._apart)
                s.host_in[i] = stage(s.host_in[i], parts, rows, pinned=True)
                sources.append(s.host_in[i][:rows])  # type: ignore[index]
        s.rows, s.staged_ns = rows, time.perf_counter_ns() - began
        graphs = self.graphs[slot] if self.graphs else None
        if graphs is None:
            bucket = None
        elif samples is not None:
            bucket = graphs.bucket(rows) if self._graph_gather else None
        else:
            bucket = graphs.bucket_for(sources)
        ev = s.events
        try:
            torch.cuda.set_stream(self._h2d)
            ev[0].record(self._h2d)
            if graphs is not None and bucket is not None:
                targets = graphs.static_inputs(bucket)
            else:
                likes = samples.tensors if samples is not None else sources
                targets = [self._dev_in(s, i, rows, like) for i, like in enumerate(likes)]
            if samples is not None and host_index is not None:
                on_device = samples.gather(s.index.send(host_index), targets)
            else:
                on_device = [self._copy_in(s, i, _first(t, rows), src)
                             for i, (t, src) in enumerate(zip(targets, sources, strict=True))]
            ev[1].record(self._h2d)
            torch.cuda.set_stream(self._compute)
            self._compute.wait_event(ev[1])
            ev[2].record(self._compute)
            if graphs is not None and bucket is not None:
                results = [_first(out, rows) for out in graphs.replay(bucket)]
            else:
                results = s.eager = self._forward(on_device)
            ev[3].record(self._compute)
            torch.cuda.set_stream(self._d2h)
            self._d2h.wait_event(ev[3])
            ev[4].record(self._d2h)
            for i, out in enumerate(results):
                land = host_buffer(s.landing[i], rows, out.shape[1:], out.dtype, pinned=True)
                if land is not s.landing[i]:  # grown: its numpy view too
                    s.landing[i], s.landed[i] = land, land.numpy()
                _first(land, rows).copy_(out, non_blocking=True)
            ev[5].record(self._d2h)
        finally:
            torch.cuda.set_stream(self._default)

    def _copy_in(self, s: _Slot, index: int, target: torch.Tensor,
                 source: torch.Tensor) -> torch.Tensor:
        """`source` (host) into `target` (device) on the h2d stream; a source of another
        dtype (plain FP32 rows for a graph's bf16 static input) lands in the slot's device
        input first and is cast on the device."""
        if target.dtype == source.dtype:
            return target.copy_(source, non_blocking=True)
        landed = _first(self._dev_in(s, index, source.shape[0], source), source.shape[0])
        landed.copy_(source, non_blocking=True)
        return target.copy_(landed)

    def _dev_in(self, s: _Slot, index: int, rows: int, like: torch.Tensor) -> torch.Tensor:
        """The slot's device input `index`, grown to `rows` rows if need be (eager path)."""
        s.dev_in[index] = buf = _device_buffer(s.dev_in[index], rows, like, self.device)
        return buf

    def ready(self, slot: int) -> bool:
        """Whether the slot's D2H is done (its last event has fired)."""
        return bool(self._slots[slot].events[5].query())  # type: ignore[no-untyped-call]

    def finish(self, slot: int) -> tuple[list[np.ndarray], dict[str, int]]:
        """Wait for the slot's D2H; copies of its outputs and the phases from its events."""
        s = self._slots[slot]
        ev = s.events
        ev[5].synchronize()
        landed = time.perf_counter_ns()
        rows = s.rows
        arrays = [land[:rows].copy() for land in s.landed if land is not None]
        s.eager = []
        h2d, compute, d2h = (round(ev[i].elapsed_time(ev[i + 1]) * _MS) for i in (0, 2, 4))
        return arrays, {H2D: s.staged_ns + h2d, COMPUTE: compute,
                        D2H: d2h + time.perf_counter_ns() - landed}

    def abandon(self, slot: int) -> None:
        """After a failed launch: wait for whatever of the slot's work was queued."""
        for stream in self.streams:
            stream.synchronize()
        self._slots[slot].eager = []
