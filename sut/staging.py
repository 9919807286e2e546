"""Host memory a batch passes through: staging buffers, and pinned blocks lent to callers.

`stage` writes a batch's rows into a reused buffer (one copy); a batch of one request
whose inputs are a `Lent` block is sent as it is (no copy at all). `PinnedPool` lends
blocks of pinned memory: a caller gathers samples straight into one
(`np.take(..., out=block, mode='clip')`) and submits it; the block comes back to the
pool once the request has been answered, by which time the device has read it.

A block holds each input in its `block_dtype`: a floating input at the model's precision,
the dtype the forward casts it to (`sut.forward.Forward`), so the values the model reads
are the same and the cast only moves to the caller's load time (`to_block`); at bf16 or
fp16 that halves the bytes to gather and copy. The samples kept on a device
(`sut.devicedata`) and a CUDA graph's static inputs hold the same dtypes. numpy has no
bfloat16: a bf16 block's numpy array is a uint16 view of the bf16 tensor's memory
(`Lent.arrays`), and `Lent.tensors` is the bf16 tensor itself.
"""

from __future__ import annotations

import threading
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oipwire.datatypes import TensorSpec
from sut.forward import PRECISIONS
from sut.tensors import torch_dtype

__all__ = ["Lent", "PinnedPool", "block_dtype", "block_dtype_of", "held_apart", "host_buffer",
           "request_parts", "stage", "to_block"]


def block_dtype(dtype: torch.dtype, precision: str) -> torch.dtype:
    """The dtype an input of `dtype` is held in at `precision` (a lent block, the samples on
    a device, a CUDA graph's static input): what the forward receives, i.e. the precision's
    when the input is floating (an FP64 input at fp32 too), else `dtype` itself."""
    return PRECISIONS[precision] if dtype.is_floating_point else dtype


def block_dtype_of(array: np.ndarray, precision: str) -> torch.dtype:
    """`block_dtype` of an input given as a numpy array (a dataset's, a sample's)."""
    return block_dtype(torch.from_numpy(array[:0]).dtype, precision)


def held_apart(specs: Sequence[TensorSpec], precision: str) -> dict[str, torch.dtype]:
    """The inputs held in another dtype than their spec's at `precision` (`block_dtype`),
    each with its spec's torch dtype: those a lent block's rows are widened back in
    (`request_parts`)."""
    spec_dtypes = {s.name: torch_dtype(s.datatype) for s in specs}
    return {name: dtype for name, dtype in spec_dtypes.items()
            if block_dtype(dtype, precision) != dtype}


def _numpy_view(tensor: torch.Tensor) -> np.ndarray:
    """`tensor`'s memory as a numpy array (a bf16 tensor as uint16: numpy has no bf16)."""
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.uint16).numpy()
    return tensor.numpy()


def to_block(array: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """`array` converted (once, at load) to a block's `dtype`, as a numpy array of the same
    kind `Lent.arrays` holds (bf16 as uint16); `array` itself when it has that dtype."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    return array if tensor.dtype == dtype else _numpy_view(tensor.to(dtype))


@dataclass(frozen=True, slots=True)
class Lent:
    """A block lent by a `PinnedPool`: numpy views to fill, over the pinned tensors.

    `arrays[name]` has `rows` rows of the input's shape, in its `block_dtype`: the spec's
    dtype, except a floating input, held at the model's precision (fp32 as float32, fp16
    as float16; bf16 as uint16, the bit patterns of the bf16 values). Fill it with rows of
    the same dtype (`to_block` converts a dataset once). `tensors[name]` is the same
    memory with the real dtype (bf16 for bf16). `spec_dtypes` names, for each input held
    in another dtype than its spec's (`held_apart`), the spec's torch dtype (empty when
    none is).
    """

    arrays: dict[str, np.ndarray]
    tensors: dict[str, torch.Tensor]
    rows: int
    block: int  # which block of the pool
    spec_dtypes: Mapping[str, torch.dtype]

    def in_spec_dtype(self, name: str) -> np.ndarray:
        """Input `name` in its spec's dtype: the array itself, or a copy cast to it when the
        block holds it in another dtype (the block's values, exactly where the spec's
        dtype is the wider, as FP32 for bf16 or FP64 for fp32)."""
        dtype = self.spec_dtypes.get(name)
        if dtype is None:
            return self.arrays[name]
        return self.tensors[name].to(dtype).numpy()


def request_parts(requests: Sequence[Any], name: str,
                  apart: Container[str]) -> list[np.ndarray]:
    """Input `name` of each request of a batch (objects with `inputs` and `lent`), in the
    spec's dtype, to be joined: when `name` is held apart (in `apart`, from `held_apart`)
    a lent block's rows are cast back (`Lent.in_spec_dtype`), so a batch that mixes one
    with plain requests joins alike dtypes; else every block holds the spec's dtype (no
    check per request)."""
    if name not in apart:
        return [r.inputs[name] for r in requests]
    return [r.inputs[name] if r.lent is None else r.lent.in_spec_dtype(name) for r in requests]


def host_buffer(current: torch.Tensor | None, rows: int, shape: Sequence[int],
                dtype: torch.dtype, pinned: bool) -> torch.Tensor:
    """`current` when it holds `rows` rows of `shape` and `dtype`, else a new buffer."""
    if (current is not None and current.shape[0] >= rows and current.dtype == dtype
            and tuple(current.shape[1:]) == tuple(shape)):
        return current
    return torch.empty((rows, *shape), dtype=dtype, pin_memory=pinned)


def stage(buffer: torch.Tensor | None, parts: Sequence[np.ndarray], rows: int,
          pinned: bool) -> torch.Tensor:
    """`parts` (each request's rows of one input) joined into `buffer` (grown if need be);
    returns the buffer (the caller keeps it); its first `rows` rows hold the batch."""
    first = parts[0]
    buffer = host_buffer(buffer, rows, first.shape[1:], torch.from_numpy(first[:0]).dtype,
                         pinned)
    view = buffer.numpy()[:rows]
    if len(parts) == 1:
        view[...] = first
    else:
        np.concatenate(parts, axis=0, out=view)
    return buffer


class PinnedPool:
    """Reusable pinned blocks of `rows` rows per input; at most `limit` of them exist.
    (`pinned=False` makes plain blocks: the same lending, on a host without CUDA.)
    Each input is held in its `block_dtype` at `precision`."""

    def __init__(self, specs: Sequence[TensorSpec], rows: int, limit: int,
                 pinned: bool = True, precision: str = "fp32") -> None:
        self._specs = tuple(specs)
        self._pinned = pinned
        self.dtypes = {s.name: block_dtype(torch_dtype(s.datatype), precision) for s in specs}
        self._spec_dtypes = held_apart(specs, precision)
        self._rows = rows
        self._limit = limit
        self._lock = threading.Lock()
        self._blocks: list[dict[int, Lent]] = []  # per block, its views by row count
        self._free: list[int] = []
        self.shapes_fixed = all(d >= 0 for s in specs for d in s.shape[1:])

    @property
    def rows(self) -> int:
        """Rows in each block."""
        return self._rows

    def lend(self, rows: int) -> Lent | None:
        """A free block's first `rows` rows; None when `rows` does not fit or none is free.
        The views of a block at a row count are made once and lent again as they are."""
        if rows > self._rows or not self.shapes_fixed:
            return None
        with self._lock:
            if self._free:
                index = self._free.pop()
            elif len(self._blocks) < self._limit:
                index = len(self._blocks)
                self._blocks.append({})  # reserved; filled outside the lock
            else:
                return None
        views = self._blocks[index]
        lent = views.get(rows)
        if lent is not None:
            return lent
        full = views.get(self._rows)
        if full is None:
            tensors = {s.name: torch.empty((self._rows, *s.shape[1:]),
                                           dtype=self.dtypes[s.name],
                                           pin_memory=self._pinned) for s in self._specs}
            full = views[self._rows] = self._views(tensors, self._rows, index)
        tensors = {name: t[:rows] for name, t in full.tensors.items()}
        lent = views[rows] = self._views(tensors, rows, index)
        return lent

    def _views(self, tensors: dict[str, torch.Tensor], rows: int, index: int) -> Lent:
        return Lent({n: _numpy_view(t) for n, t in tensors.items()}, tensors, rows, index,
                    self._spec_dtypes)

    def give_back(self, lent: Lent) -> None:
        """Return a lent block; call once the device has read it."""
        with self._lock:
            self._free.append(lent.block)
