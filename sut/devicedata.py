"""Samples that start on the device (`start_from_device`): the dataset's inputs copied to
each GPU before the run, so a batch crosses PCIe as int64 sample indices and is gathered
on the GPU.

MLPerf lets the performance sample set be staged before timing, and NVIDIA's harness
calls this `start_from_device`. Only an in-process caller that draws its samples from the
model's dataset (loadgen's in-process adapter) can send indices; over HTTP/gRPC the bytes
come on the wire. On the CPU the samples are in memory already, so it is never on there.

- `decide`: on or off, and why, as a pure function of the device, the caller, the
  input shapes and the sizes (`auto`: on when the dataset at the model's precision takes
  at most 1/`AUTO_SHARE` of the device's free memory).
- `place_samples`: the decision, and when on the copies, for a service starting;
  `index_rows` checks a request of indices (an index out of range would stop the device).
- `DeviceSamples`: one device's copy (each input in its `sut.staging.block_dtype`, as a
  lent block holds it: floating ones at the model's precision), shared by that device's
  instances; `gather` writes a batch's rows by index into the buffers the
  forward reads (a graph's static inputs, or the slot's eager inputs).
- `INDEX_SPEC`: what an index request carries (one int64 per row), lent in blocks as rows
  are (`sut.staging.PinnedPool` over this spec); `IndexBuffers`: a slot's (or a serial
  worker's) host and device index buffers, reused, that join a batch's indices and put
  them on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from oipwire.datatypes import TensorSpec
from sut.errors import InvalidInput
from sut.staging import Lent, block_dtype_of, stage

__all__ = ["AUTO_SHARE", "INDEX_SPEC", "SAMPLE_INDEX", "DeviceSamples", "IndexBuffers",
           "SamplesDecision", "dataset_bytes", "decide", "index_rows", "place_samples"]

AUTO_SHARE = 8  # auto: on when the dataset takes at most 1/8 of the device's free memory
SAMPLE_INDEX = "sample_index"
INDEX_SPEC = TensorSpec(SAMPLE_INDEX, "INT64", (-1,))
_MIB = 1 << 20


@dataclass(frozen=True, slots=True)
class SamplesDecision:
    """Whether samples start on the device, and why."""

    on: bool
    reason: str


def decide(asked: bool | None, *, cuda: bool, in_process: bool, fixed_shapes: bool,
           dataset_bytes: int, free_bytes: int) -> SamplesDecision:
    """`asked` (None: auto) resolved for a device and a caller. Never on the CPU nor for a
    caller outside this process; `true` needs inputs of fixed shape; auto also needs the
    dataset (`dataset_bytes`, at the model's precision) within 1/AUTO_SHARE of
    `free_bytes`, the device's free memory."""
    if not cuda:
        return SamplesDecision(False, "on the CPU samples start on the host")
    if not in_process:
        return SamplesDecision(False, "requests bring their inputs (HTTP/gRPC)")
    if asked is False:
        return SamplesDecision(False, "start_from_device=false")
    if not fixed_shapes:
        return SamplesDecision(False, "inputs of variable shape")
    if asked:
        return SamplesDecision(True, "start_from_device=true")
    need, free = dataset_bytes / _MIB, free_bytes / _MIB
    if dataset_bytes * AUTO_SHARE <= free_bytes:
        return SamplesDecision(True, f"auto: {need:.1f} MiB <= 1/{AUTO_SHARE} of {free:.0f}"
                                     " MiB free")
    return SamplesDecision(False, f"auto: {need:.1f} MiB > 1/{AUTO_SHARE} of {free:.0f} MiB"
                                  " free")


def place_samples(asked: bool | None, devices: Sequence[str], specs: Sequence[TensorSpec],
                  read_all: Callable[[], Mapping[str, np.ndarray]], precision: str, *,
                  in_process: bool) -> tuple[SamplesDecision, dict[str, DeviceSamples] | None]:
    """`decide` for `devices` (all CPU or all CUDA) and the model's input `specs`, then the
    dataset (`read_all`: every sample's inputs, read only when it may go) copied to each
    device with floating inputs at `precision`, when on."""
    cuda = devices[0].startswith("cuda")
    fixed = all(d >= 0 for spec in specs for d in spec.shape[1:])
    arrays: list[np.ndarray] = []
    need = free = 0
    if cuda and in_process and fixed and asked is not False:
        every = read_all()
        arrays = [every[spec.name] for spec in specs]
        need = dataset_bytes(arrays, precision)
        free = min(torch.cuda.mem_get_info(torch.device(d))[0] for d in devices)
    decision = decide(asked, cuda=cuda, in_process=in_process, fixed_shapes=fixed,
                      dataset_bytes=need, free_bytes=free)
    if not decision.on:
        return decision, None
    placed = {d: DeviceSamples.upload(arrays, torch.device(d), precision) for d in devices}
    for device in devices:
        torch.cuda.synchronize(device)
    return decision, placed


def index_rows(inputs: Mapping[str, np.ndarray], limit: int, size: int) -> int:
    """The rows of a request of sample indices in [0, `size`), at most `limit`; InvalidInput
    when it is not one (checked lent or not: an index out of range would stop the device)."""
    index = inputs.get(SAMPLE_INDEX) if len(inputs) == 1 else None
    if (not isinstance(index, np.ndarray) or index.dtype != np.int64 or index.ndim != 1
            or len(index) < 1):
        raise InvalidInput(f"the samples start on the device: want {{{SAMPLE_INDEX!r}: "
                           f"int64 indices}}, got {sorted(inputs)}")
    if len(index) > limit:
        raise InvalidInput(f"{len(index)} rows exceed max_batch_size={limit}")
    if int(index.view(np.uint64).max()) >= size:  # negatives wrap to the top
        raise InvalidInput(f"sample indices must be in [0, {size})")
    return len(index)


def dataset_bytes(arrays: Sequence[np.ndarray], precision: str) -> int:
    """Bytes the inputs take on the device, floating ones at `precision`."""
    return sum(a.size * torch.empty(0, dtype=block_dtype_of(a, precision)).element_size()
               for a in arrays)


class DeviceSamples:
    """One device's copy of a dataset's inputs (spec order), read by `gather`."""

    def __init__(self, tensors: Sequence[torch.Tensor]) -> None:
        self.tensors = tuple(tensors)
        self.size = self.tensors[0].shape[0]
        self.nbytes = sum(t.numel() * t.element_size() for t in self.tensors)

    @classmethod
    def upload(cls, arrays: Sequence[np.ndarray], device: torch.device,
               precision: str) -> DeviceSamples:
        """`arrays` (every sample, spec order) copied to `device`, floating ones at
        `precision`."""
        return cls([torch.from_numpy(np.ascontiguousarray(a)).to(
            device=device, dtype=block_dtype_of(a, precision)) for a in arrays])

    @property
    def dtypes(self) -> tuple[torch.dtype, ...]:
        """Each input's dtype as kept."""
        return tuple(t.dtype for t in self.tensors)

    def fits(self, targets: Sequence[torch.Tensor]) -> bool:
        """Whether `gather` can write into `targets` (row shapes and dtypes alike)."""
        return len(targets) == len(self.tensors) and all(
            t.shape[1:] == d.shape[1:] and t.dtype == d.dtype
            for t, d in zip(targets, self.tensors, strict=True))

    def gather(self, index: torch.Tensor, targets: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Each input's rows `index` (on this device) into the first len(index) rows of its
        target (queued on the current stream); returns those views."""
        rows = index.shape[0]
        views = []
        for data, target in zip(self.tensors, targets, strict=True):
            view = target if target.shape[0] == rows else target[:rows]
            torch.index_select(data, 0, index, out=view)
            views.append(view)
        return views

    def select(self, index: torch.Tensor) -> list[torch.Tensor]:
        """Each input's rows `index` in new tensors (on the current stream)."""
        return [torch.index_select(data, 0, index) for data in self.tensors]


class IndexBuffers:
    """A slot's (or a serial worker's) index buffers, reused: host (pinned on CUDA) and
    device."""

    def __init__(self, device: torch.device, pinned: bool) -> None:
        self._device = device
        self._pinned = pinned
        self._host: torch.Tensor | None = None
        self._on_device: torch.Tensor | None = None

    def join(self, parts: Sequence[np.ndarray], rows: int,
             lent: Lent | None = None) -> torch.Tensor:
        """The batch's `rows` indices on the host: `lent`, the block a batch of one request
        was gathered into, as it is; else `parts` (each request's indices, in order)
        joined into the host buffer."""
        if lent is not None:
            return lent.tensors[SAMPLE_INDEX]
        self._host = stage(self._host, parts, rows, pinned=self._pinned)
        return self._host[:rows]

    def send(self, host: torch.Tensor) -> torch.Tensor:
        """`host` (from `join`) copied to the device buffer (queued on the current stream)."""
        rows = host.shape[0]
        buffer = self._on_device
        if buffer is None or buffer.shape[0] < rows:
            buffer = self._on_device = torch.empty(rows, dtype=torch.int64, device=self._device)
        view = buffer if buffer.shape[0] == rows else buffer[:rows]
        view.copy_(host, non_blocking=True)
        return view
