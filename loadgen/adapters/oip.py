"""What the Open Inference Protocol adapters (HTTP and gRPC) share: inputs, reports, timing join.

Endpoints (`SCHEME://HOST[:PORT]/MODEL[?key=value&...]`) are `wire.endpoint`'s. `Samples` holds deterministic seeded data
matching the model metadata and the pre-built payload of every single-sample query;
`report_done` and `report_failed` report a request (a query, or a part of a `wire.queueing.Job`)
to the sink; `add_network` joins the client's service latency with the
server's reported `server_total`. Tensor specs, datatypes and the server timings' names
are `oipwire`'s, the same the server uses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from loadgen.adapters.base import CompletionSink
from loadgen.adapters.wire.queueing import Tag
from loadgen.errors import SutError
from oipwire.datatypes import TensorSpec, numpy_dtype
from oipwire.errors import ProtocolError
from oipwire.tensors import InferTensor
from oipwire.timing import SERVER_TOTAL

__all__ = ["COMMON_KEYS", "SAMPLE_BYTES_BUDGET", "Samples", "add_network", "metadata_inputs",
           "report_done", "report_failed", "sample_count", "synthetic_inputs"]

COMMON_KEYS = ("max_in_flight", "timeout_ms", "token", "tls", "ca", "version", "samples", "seed",
               "batch")
"""Option keys every remote adapter takes; each adapter adds its own."""
SAMPLE_BYTES_BUDGET = 256 << 20
"""Synthetic samples are capped so that their raw bytes stay under this."""

P = TypeVar("P")


# --- inputs ---------------------------------------------------------------------------------


def synthetic_inputs(inputs: Sequence[TensorSpec], count: int, seed: int,
                     batched: bool) -> dict[str, np.ndarray]:
    """`count` samples per input, shape (count, *sample shape); -1 dims past the batch are 1.

    Floats are standard normal, integers in [0, 100) (BOOL: 0/1), BYTES short ASCII strings;
    the same (metadata, count, seed) gives the same data.
    """
    out: dict[str, np.ndarray] = {}
    for position, spec in enumerate(inputs):
        rng = np.random.default_rng([seed, position])
        dims = spec.shape[1:] if batched else spec.shape
        shape = (count, *(1 if d < 0 else d for d in dims))
        dtype = numpy_dtype(spec.datatype)
        if dtype.kind == "f":
            data = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            data = rng.integers(0, 2, shape).astype(dtype)
        elif dtype.kind in "iu":
            data = rng.integers(0, 100, shape).astype(dtype)
        else:
            values = rng.integers(0, 10**6, shape).ravel()
            data = np.array([b"s%d" % v for v in values.tolist()], dtype=object).reshape(shape)
        out[spec.name] = data
    return out


def sample_count(inputs: Sequence[TensorSpec], wanted: int, batched: bool) -> int:
    """`wanted`, lowered so the samples' bytes stay under `SAMPLE_BYTES_BUDGET`."""
    size = sum(max(numpy_dtype(s.datatype).itemsize, 8) * int(np.prod(
        [1 if d < 0 else d for d in (s.shape[1:] if batched else s.shape)])) for s in inputs)
    return max(1, min(wanted, SAMPLE_BYTES_BUDGET // max(size, 1)))


class Samples(Generic[P]):
    """Synthetic samples and their request payloads: every single-sample one built at start.

    `rows` is how many samples a request may carry: `batch` when every input's first dim is
    -1 (the batch dim), else 1. `build` turns a list of tensors into a payload.
    """

    def __init__(self, inputs: Sequence[TensorSpec], batch: int, wanted: int, seed: int,
                 build: Callable[[list[InferTensor]], P]) -> None:
        self.inputs = list(inputs)
        self.batched = all(s.shape[:1] == (-1,) for s in inputs)
        self.rows = batch if self.batched else 1
        self.count = sample_count(inputs, wanted, self.batched)
        self.block = synthetic_inputs(inputs, self.count, seed, self.batched)
        self.build = build
        self.single = [build(self.tensors(np.array([i]))) for i in range(self.count)]

    def tensors(self, picked: np.ndarray) -> list[InferTensor]:
        """The request tensors of these samples (indices below `count`)."""
        out = []
        for spec in self.inputs:
            data = self.block[spec.name][picked]
            if not self.batched:
                data = data[0]
            out.append(InferTensor(spec.name, spec.datatype, data.shape, data))
        return out

    def payload(self, indices: Sequence[int] | np.ndarray) -> P:
        """The payload of up to `rows` samples (library indices, taken mod `count`)."""
        if len(indices) == 1:
            return self.single[int(indices[0]) % self.count]
        return self.build(self.tensors(np.remainder(indices, self.count)))


# --- timings --------------------------------------------------------------------------------


def add_network(components: dict[str, int], service_ns: int) -> dict[str, int] | None:
    """Add `network` = service latency - the server's `server_total` (when it reported one)."""
    total = components.get(SERVER_TOTAL)
    if total is not None:
        components["network"] = max(service_ns - total, 0)
    return components or None


def report_done(sink: CompletionSink, tag: Tag, done_ns: int,
                components: dict[str, int] | None) -> None:
    """A request succeeded: report its query, or its part of a `Job`."""
    if type(tag) is int:
        sink.done(tag, done_ns, components)
        return
    job, start = tag
    job.outstanding -= 1
    if job.failed:
        return
    if job.rows == 1:
        job.sample_done[start] = done_ns
    else:
        end = min(start + job.rows, job.size)
        job.sample_done[start:end] = [done_ns] * (end - start)
    if done_ns >= job.last_done:
        job.last_done, job.components = done_ns, components
    if job.outstanding == 0 and job.next >= job.size:
        sink.done(job.query_id, job.last_done, job.components, job.sample_done)


def report_failed(sink: CompletionSink, tag: Tag, now_ns: int, kind: str,
                  detail: str | None = None) -> None:
    """A request failed: its query fails once; a `Job` sends no more parts. `detail` is what
    a person needs to see why (status line and body excerpt, reason, exception text)."""
    if type(tag) is int:
        sink.failed(tag, now_ns, kind, detail)
        return
    job = tag[0]
    job.outstanding -= 1
    if not job.failed:
        job.failed = True
        sink.failed(job.query_id, now_ns, kind, detail)


def metadata_inputs(doc: Mapping[str, Any], model: str) -> list[TensorSpec]:
    """The input specs of a model metadata document (JSON or protobuf-as-dict)."""
    items = doc.get("inputs")
    if not isinstance(items, list) or not items:
        raise SutError(f"model {model!r}: metadata lists no inputs")
    specs: list[TensorSpec] = []
    for item in items:
        try:
            specs.append(TensorSpec.from_metadata(item))
        except ProtocolError as exc:
            raise SutError(f"model metadata: bad input {item!r}: {exc}") from None
    return specs
