"""The pipeline's device work on the CPU: the same ring, with CPU tensors for the streams.

A launch stages the batch into its slot's reused input buffers (or reads a lent block
as it is, as the CUDA launcher does) and runs the forward at once (on the CPU nothing
is queued); `finish` hands back copies of the outputs (they may alias the slot's
inputs or the lent block, which are written again) and the phases, timed with
`perf_counter_ns`.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from oipwire.datatypes import TensorSpec
from oipwire.timing import COMPUTE, D2H, H2D
from sut.forward import Forward
from sut.staging import held_apart, request_parts, stage

__all__ = ["HostLauncher"]


class _Slot:
    def __init__(self, inputs: int) -> None:
        self.inputs: list[torch.Tensor | None] = [None] * inputs
        self.outputs: list[torch.Tensor] = []
        self.phases: dict[str, int] = {}


class HostLauncher:
    """The `Launcher` of one instance on the CPU."""

    device = torch.device("cpu")

    def __init__(self, forward: Forward, inputs: tuple[TensorSpec, ...], slots: int = 3) -> None:
        self._forward = forward
        self._apart = held_apart(inputs, forward.precision)  # inputs lent in another dtype
        self._names = tuple(s.name for s in inputs)
        self._slots = [_Slot(len(inputs)) for _ in range(slots)]

    @property
    def slots(self) -> int:
        """The ring's length."""
        return len(self._slots)

    def input_buffers(self, slot: int) -> list[torch.Tensor | None]:
        """The slot's reused input buffers (for tests of ring reuse)."""
        return list(self._slots[slot].inputs)

    def bind_thread(self) -> None:
        """Nothing to bind on the CPU."""

    def launch(self, slot: int, batch: Any) -> None:
        """Stage into the slot's buffers and run the forward now."""
        began = time.perf_counter_ns()
        s = self._slots[slot]
        rows, requests = batch.rows, batch.requests
        lent = requests[0].lent if len(requests) == 1 else None
        staged = []
        for i, name in enumerate(self._names):
            if lent is not None:  # a lent block is read as it is (no staging copy)
                staged.append(lent.tensors[name])  # the request's rows: the batch's
                continue
            parts = request_parts(requests, name, self._apart)
            s.inputs[i] = buf = stage(s.inputs[i], parts, rows, pinned=False)
            staged.append(buf[:rows])
        staged_ns = time.perf_counter_ns()
        s.outputs = self._forward(staged)
        s.phases = {H2D: staged_ns - began, COMPUTE: time.perf_counter_ns() - staged_ns}

    def ready(self, slot: int) -> bool:
        """Always: the forward ran at launch."""
        return True

    def finish(self, slot: int) -> tuple[list[np.ndarray], dict[str, int]]:
        """Copies of the slot's outputs, and its phases."""
        s = self._slots[slot]
        began = time.perf_counter_ns()
        arrays = [t.numpy().copy() for t in s.outputs]
        s.outputs = []
        return arrays, {**s.phases, D2H: time.perf_counter_ns() - began}

    def abandon(self, slot: int) -> None:
        """Drop whatever the failed launch left."""
        self._slots[slot].outputs = []
