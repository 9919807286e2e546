"""What the HTTP and gRPC adapters share: spec parsing, synthetic inputs, queueing, timing join.

    SCHEME://HOST[:PORT]/MODEL[?key=value&...]

`Endpoint.parse` splits a spec and checks every option key against the adapter's own list
(an unknown key is a `SutSpecError` naming it). `Samples` holds deterministic seeded data
matching the model metadata and the pre-built payload of every single-sample query;
`Pending` is the local FIFO in front of the connections (a query of many requests yields
them lazily, as `Job` parts); `add_network` joins the client's service latency with the
server's reported `server_total`. Tensor specs, datatypes and the server timings' names
are `oipwire`'s, the same the server uses.
"""

from __future__ import annotations

import collections
import ssl
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import numpy as np

from loadgen.adapters.base import CompletionSink
from loadgen.errors import SutError, SutSpecError, suggest
from oipwire.datatypes import TensorSpec, numpy_dtype
from oipwire.errors import ProtocolError
from oipwire.tensors import InferTensor
from oipwire.timing import SERVER_TOTAL

__all__ = ["COMMON_KEYS", "SAMPLE_BYTES_BUDGET", "Endpoint", "Job", "Pending", "Samples", "Tag",
           "add_network", "metadata_inputs", "report_done", "report_failed", "sample_count",
           "synthetic_inputs", "tls_context"]

COMMON_KEYS = ("max_in_flight", "timeout_ms", "token", "tls", "ca", "version", "samples", "seed",
               "batch")
"""Option keys every remote adapter takes; each adapter adds its own."""
SAMPLE_BYTES_BUDGET = 256 << 20
"""Synthetic samples are capped so that their raw bytes stay under this."""

P = TypeVar("P")
Tag = Any  # a query id (int) or a (Job, first row) part


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A parsed remote spec; `options` holds the raw strings of the keys given."""

    scheme: str
    host: str
    port: int
    model: str
    tls: bool
    options: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        """host:port, IPv6 hosts bracketed."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The endpoint without options (no token), for the result."""
        return f"{self.scheme}://{self.address}/{self.model}"

    def flag(self, key: str, default: bool = False) -> bool:
        """A 0/1 option."""
        value = self.options.get(key)
        if value is None:
            return default
        if value not in ("0", "1", "true", "false"):
            raise SutSpecError(f"{self.url}: {key}={value!r}: expected 0 or 1")
        return value in ("1", "true")

    def number(self, key: str, default: int, minimum: int = 0) -> int:
        """An integer option of at least `minimum`."""
        value = self.options.get(key)
        if value is None:
            return default
        try:
            number = int(value)
        except ValueError:
            raise SutSpecError(f"{self.url}: {key}={value!r}: expected an integer") from None
        if number < minimum:
            raise SutSpecError(f"{self.url}: {key}={value!r}: must be at least {minimum}")
        return number

    @classmethod
    def parse(cls, spec: str, schemes: Mapping[str, tuple[int, bool]],
              keys: Sequence[str]) -> Endpoint:
        """Split SCHEME://HOST[:PORT]/MODEL?k=v; `schemes` maps scheme -> (default port, tls)."""
        form = f"{'|'.join(schemes)}://HOST[:PORT]/MODEL[?key=value&...]"
        parts = urllib.parse.urlsplit(spec)
        if parts.scheme not in schemes or not parts.hostname:
            raise SutSpecError(f"--sut {spec!r}: expected {form}")
        model = parts.path.strip("/")
        if not model or "/" in model:
            raise SutSpecError(f"--sut {spec!r}: expected one model name after the host ({form})")
        try:
            port = parts.port or schemes[parts.scheme][0]
            pairs = urllib.parse.parse_qsl(parts.query, keep_blank_values=True,
                                           strict_parsing=bool(parts.query))
        except ValueError as exc:
            raise SutSpecError(f"--sut {spec!r}: {exc}") from None
        options = dict(pairs)
        unknown = sorted(set(options) - set(keys))
        if unknown:
            raise SutSpecError(f"--sut {spec!r}: unknown key(s) {', '.join(unknown)}"
                               f"{suggest(unknown[0], keys)}; known: {', '.join(sorted(keys))}")
        endpoint = cls(parts.scheme, parts.hostname, port, model, schemes[parts.scheme][1],
                       options)
        if endpoint.flag("tls"):
            endpoint = cls(endpoint.scheme, endpoint.host, port, model, True, options)
        return endpoint


def tls_context(endpoint: Endpoint, insecure: bool = False) -> ssl.SSLContext | None:
    """The client TLS context an endpoint asks for (`ca=FILE`, `insecure=1`), or None."""
    if not endpoint.tls:
        return None
    try:
        context = ssl.create_default_context(cafile=endpoint.options.get("ca"))
    except OSError as exc:
        raise SutSpecError(f"{endpoint.url}: ca: {exc}") from None
    if insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


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


# --- queueing -------------------------------------------------------------------------------


class Job(Generic[P]):
    """A query sent as several requests of at most `rows` samples; reported once, at the end."""

    __slots__ = ("components", "encode", "failed", "indices", "last_done", "next", "outstanding",
                 "query_id", "rows", "sample_done", "size")

    def __init__(self, query_id: int, indices: np.ndarray, rows: int,
                 encode: Callable[[Sequence[int]], P]) -> None:
        self.query_id = query_id
        self.indices: list[int] = indices.tolist()
        self.size = len(self.indices)
        self.rows = rows
        self.encode = encode
        self.next = self.outstanding = self.last_done = 0
        self.failed = False
        self.sample_done = [0] * len(indices)
        self.components: dict[str, int] | None = None

    def take(self) -> tuple[Tag, P] | None:
        """The next part to send, or None when all are sent (or the query failed)."""
        start = self.next
        if self.failed or start >= self.size:
            return None
        self.next = start + self.rows
        self.outstanding += 1
        return (self, start), self.encode(self.indices[start:start + self.rows])

    def last_part(self) -> bool:
        """Whether the part now answering is the query's last one (so its timings are kept)."""
        return self.outstanding == 1 and self.next >= self.size and not self.failed


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


class Pending(Generic[P]):
    """Requests waiting for a free connection or slot, first in, first out."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: collections.deque[tuple[Any, P | None]] = collections.deque()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, tag: Tag, payload: P) -> None:
        """Queue one request."""
        self._items.append((tag, payload))

    def put_job(self, job: Job[P]) -> None:
        """Queue a query of several requests; its parts are encoded as they are taken."""
        self._items.append((job, None))

    def pop(self) -> tuple[Tag, P] | None:
        """The oldest request, or None."""
        items = self._items
        while items:
            tag, payload = items[0]
            if payload is not None:
                items.popleft()
                return tag, payload
            part: tuple[Tag, P] | None = tag.take()
            if part is not None:
                return part
            items.popleft()
        return None

    def fail_all(self, fail: Callable[[Tag, int, str, str | None], None], now_ns: int,
                 kind: str, detail: str | None = None) -> None:
        """Fail every waiting request (nothing can carry them); a `Job` fails once."""
        while self._items:
            tag, payload = self._items.popleft()
            if payload is not None:
                fail(tag, now_ns, kind, detail)
            elif not tag.failed:
                fail((tag, tag.next), now_ns, kind, detail)


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
