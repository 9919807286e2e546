"""CUDA graphs of a forward pass, one per batch-size bucket, captured at load.

A batch of r rows runs in the graph of the smallest bucket b >= r: its rows are copied
into the bucket's static input (rows r..b keep whatever they held; every built-in and
served model is row-independent at inference), the graph is replayed (one launch for the
whole forward, precision casts included), and the caller copies the first r rows of the
static outputs out before the bucket's next replay. Each `capture` has its own memory
pool, so a pipeline captures one set per ring slot: a slot's H2D lands in its own static
inputs and its D2H reads its own static outputs, while other slots replay theirs.
Buckets are 1, 2, 4, ... up to the largest batch, and the largest batch itself. Every
bucket is checked once against the eager forward on the same inputs; a capture that
fails or disagrees raises `GraphError` and the caller runs eager, saying why.
Static inputs hold the `block_dtype` (a floating input at the model's precision, as the
forward receives it), the dtype of the blocks the service lends and of the samples on the
device, so a lent block is copied in as it is and the samples gathered into them; a
floating input of another dtype is cast into them on the device.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from sut.forward import Forward
from sut.staging import block_dtype_of

__all__ = ["TOLERANCE", "GraphError", "GraphSet", "buckets_up_to"]

#: largest |graph - eager| allowed, as a fraction of max(1, largest |eager|)
TOLERANCE = {"fp32": 1e-4, "fp16": 1e-2, "bf16": 5e-2}


class GraphError(RuntimeError):
    """A forward pass that cannot run as CUDA graphs; the message says why."""


def buckets_up_to(max_rows: int) -> tuple[int, ...]:
    """1, 2, 4, ... below `max_rows`, then `max_rows`."""
    sizes = []
    size = 1
    while size < max_rows:
        sizes.append(size)
        size *= 2
    return (*sizes, max_rows)


class GraphSet:
    """One instance's captured forwards; `run` replays on the calling thread's stream."""

    def __init__(self, buckets: tuple[int, ...], inputs: dict[int, list[torch.Tensor]],
                 outputs: dict[int, list[torch.Tensor]],
                 graphs: dict[int, torch.cuda.CUDAGraph]) -> None:
        self.buckets = buckets
        self._inputs = inputs
        self._outputs = outputs
        self._graphs = graphs

    def bucket(self, rows: int) -> int | None:
        """The smallest bucket holding `rows` rows, or None past the largest."""
        for size in self.buckets:
            if size >= rows:
                return size
        return None

    def bucket_for(self, inputs: Sequence[torch.Tensor]) -> int | None:
        """The bucket for these inputs, or None when no graph fits them (more rows than
        the largest bucket, a row shape other than the captured one, or a dtype other than
        the captured one, unless both are floating: then the caller casts into it)."""
        bucket = self.bucket(inputs[0].shape[0])
        if bucket is None:
            return None
        for static, given in zip(self._inputs[bucket], inputs, strict=True):
            if static.shape[1:] != given.shape[1:] or (
                    static.dtype != given.dtype
                    and not (static.is_floating_point() and given.is_floating_point())):
                return None
        return bucket

    def static_inputs(self, bucket: int) -> list[torch.Tensor]:
        """The bucket's static inputs (`bucket` rows each, on the device, in spec order)."""
        return self._inputs[bucket]

    def replay(self, bucket: int) -> list[torch.Tensor]:
        """Replay the bucket's graph on the current stream; its static outputs, valid until
        this bucket's next replay."""
        self._graphs[bucket].replay()
        return self._outputs[bucket]

    def run(self, bucket: int, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Copy `inputs` (r <= bucket rows, on the device) in, replay; the static outputs,
        whose first r rows are the answer until this bucket's next replay."""
        for static, given in zip(self._inputs[bucket], inputs, strict=True):
            static[:given.shape[0]].copy_(given)
        self._graphs[bucket].replay()
        return self._outputs[bucket]

    @classmethod
    def capture(cls, forward: Forward, device: torch.device, sample: Sequence[np.ndarray],
                max_rows: int, dtypes: Sequence[torch.dtype] = ()) -> GraphSet:
        """Capture every bucket up to `max_rows` from `sample` (max_rows rows per input, in
        spec order; static inputs in `dtypes` when given, else in the sample's `block_dtype`
        at the precision) and check each against eager; GraphError says why it cannot."""
        if any(a.shape[0] < max_rows for a in sample):
            raise GraphError(f"capture needs {max_rows} sample rows")
        tolerance = TOLERANCE[forward.precision]
        kinds = list(dtypes) or [block_dtype_of(a, forward.precision) for a in sample]
        buckets = buckets_up_to(max_rows)
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
        side.wait_stream(torch.cuda.current_stream(device))
        inputs: dict[int, list[torch.Tensor]] = {}
        outputs: dict[int, list[torch.Tensor]] = {}
        graphs: dict[int, torch.cuda.CUDAGraph] = {}
        with torch.inference_mode(), torch.cuda.device(device), torch.cuda.stream(side):
            for size in reversed(buckets):  # largest first: the smaller reuse its pool
                try:
                    static = [_static(a[:size], device, dtype)
                              for a, dtype in zip(sample, kinds, strict=True)]
                    for _ in range(2):  # lazy initialisation (cuBLAS handles...) before capture
                        forward(static)
                    side.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    # capture_begin, not `torch.cuda.graph`: that one runs gc.collect() and
                    # empties the cache per capture (tens of ms each, 2 x 9 buckets)
                    graph.capture_begin(pool=pool, capture_error_mode="thread_local")
                    try:
                        captured = forward(static)
                    finally:
                        graph.capture_end()
                    graph.replay()
                    eager = forward(static)
                    side.synchronize()
                except Exception as exc:
                    raise GraphError(f"capture at batch {size} failed: {exc!r}") from exc
                _check(size, captured, eager, tolerance)
                inputs[size], outputs[size], graphs[size] = static, captured, graph
        return cls(buckets, inputs, outputs, graphs)


def _static(rows: np.ndarray, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A static input: `rows` on the device, as `dtype`."""
    return torch.from_numpy(np.ascontiguousarray(rows)).to(device=device, dtype=dtype)


def _check(size: int, captured: Sequence[torch.Tensor], eager: Sequence[torch.Tensor],
           tolerance: float) -> None:
    for index, (got, want) in enumerate(zip(captured, eager, strict=True)):
        if got.shape != want.shape or got.dtype != want.dtype:
            raise GraphError(f"batch {size}, output {index}: graph gives {tuple(got.shape)} "
                             f"{got.dtype}, eager {tuple(want.shape)} {want.dtype}")
        if not got.is_floating_point():
            if not torch.equal(got, want):
                raise GraphError(f"batch {size}, output {index}: graph differs from eager")
            continue
        scale = max(1.0, float(want.abs().max()))
        worst = float((got.float() - want.float()).abs().max())
        if not worst <= tolerance * scale:  # also catches NaN
            raise GraphError(f"batch {size}, output {index}: graph differs from eager by "
                             f"{worst:.3g} (> {tolerance:g} x {scale:.3g})")
