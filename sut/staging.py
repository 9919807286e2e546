"""Host memory a batch passes through: staging buffers, and pinned blocks lent to callers.

`stage` writes a batch's rows into a reused buffer (one copy); a batch of one request
whose inputs are a `Lent` block is sent as it is (no copy at all). `PinnedPool` lends
blocks of pinned memory: a caller gathers samples straight into one
(`np.take(..., out=block, mode='clip')`) and submits it; the block comes back to the
pool once the request has been answered, by which time the device has read it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from oipwire.datatypes import TensorSpec
from sut.tensors import torch_dtype

__all__ = ["Lent", "PinnedPool", "host_buffer", "stage"]


@dataclass(frozen=True, slots=True)
class Lent:
    """A block lent by a `PinnedPool`: numpy views to fill, over the pinned tensors."""

    arrays: dict[str, np.ndarray]  # `rows` rows each, in the input specs' dtypes
    tensors: dict[str, torch.Tensor]  # the same memory, as torch tensors
    rows: int
    block: int  # which block of the pool


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
    (`pinned=False` makes plain blocks: the same lending, on a host without CUDA.)"""

    def __init__(self, specs: Sequence[TensorSpec], rows: int, limit: int,
                 pinned: bool = True) -> None:
        self._specs = tuple(specs)
        self._pinned = pinned
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
                                           dtype=torch_dtype(s.datatype),
                                           pin_memory=self._pinned) for s in self._specs}
            full = views[self._rows] = Lent({n: t.numpy() for n, t in tensors.items()},
                                            tensors, self._rows, index)
        tensors = {name: t[:rows] for name, t in full.tensors.items()}
        lent = views[rows] = Lent({n: t.numpy() for n, t in tensors.items()}, tensors, rows,
                                  index)
        return lent

    def give_back(self, lent: Lent) -> None:
        """Return a lent block; call once the device has read it."""
        with self._lock:
            self._free.append(lent.block)
