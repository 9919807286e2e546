"""Open Inference Protocol (KServe v2 / Triton) over HTTP/1.1, on the lean client in `fasthttp`.

    http://HOST[:PORT]/MODEL[?key=value&...]      (https:// for TLS; port 80/443 by default)

Options (query-string keys; an unknown key is a SutSpecError naming it):

    connections=64     keep-alive connections; each carries one request at a time
    max_in_flight=N    requests in flight at most (default: connections; lowers connections)
    timeout_ms=0       fail a request unanswered this long after it was sent (0: never)
    token=T            send `Authorization: Bearer T`
    tls=1              TLS on an http:// spec; ca=FILE trusts that CA bundle; insecure=1
                       skips certificate checks
    binary=1           binary tensor data (0: JSON `data` lists, inputs and outputs)
    outputs=binary     how the server should send outputs: binary (default, when binary=1)
                       or json (`binary_data_output` false: JSON `data` lists, as a client
                       without binary support would ask; the timings are read the same way)
    version=V          model version (default: the server's choice)
    batch=8            samples per request at most (a larger query is split; the model's
                       first dim must be -1, else each request carries one sample)
    samples=1024       distinct synthetic samples (sample index i uses i mod samples)
    seed=0             seed of the synthetic samples

At start the adapter checks `/v2/health/ready` and the model's `/ready`, reads its metadata,
builds seeded synthetic samples that match it, and pre-serialises the whole HTTP request of
every single-sample query. Queries beyond the free connections wait in a local FIFO (their
latency still counts from the scheduled time). Each completion is stamped in
`data_received`; its components are the server's timing parameters (every one of
`oipwire.timing`, under its component name; read from the JSON
header by a scan, not decoded: json.loads costs ~5 µs, most of the per-request budget) and
`network` = service latency - `server_total`. Failures: `http_<status>`, `timeout`,
`connection_reset`, `connect_error`, `protocol_error` (also a 200 whose body is not a JSON
object: a web page where a server was expected); each with a detail (the status line
and the error message of the body, `{"error": ...}` or FastAPI's `{"detail": ...}`, else
its first bytes; the protocol error's reason; the exception text).

Real servers: any HTTP/1.1 framing (`fasthttp`: KServe answers binary requests chunked,
with a lower-case `inference-header-content-length` and no Content-Type); JSON nulls for
optional metadata fields (`"versions": null`, `"parameters": null`) are absent fields; with
`version=V` a server that answers 404 or 501 on `/versions/V` URLs gets a start error
saying to drop `version=` (without it the adapter only uses unversioned URLs).
"""

from __future__ import annotations

import http
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from loadgen.adapters.base import CompletionSink, Timers
from loadgen.adapters.oip import (
    COMMON_KEYS,
    Samples,
    metadata_inputs,
    report_done,
    report_failed,
)
from loadgen.adapters.wire.endpoint import Endpoint, tls_context
from loadgen.adapters.wire.fasthttp import HttpPool, fetch, request_bytes
from loadgen.adapters.wire.queueing import Job, Tag
from loadgen.errors import SutError, SutSpecError
from oipwire.codec import HEADER_LENGTH, encode_request
from oipwire.messages import InferRequest
from oipwire.tensors import InferTensor
from oipwire.timing import PARAMETER_COMPONENTS, SERVER_TOTAL

__all__ = ["HTTP_KEYS", "HttpSut", "Timings", "error_detail"]

HTTP_KEYS = (*COMMON_KEYS, "connections", "binary", "insecure", "outputs")
OUTPUTS = ("binary", "json")
EXCERPT = 200
"""Bytes of an error body kept in a failure's detail."""
SCHEMES = {"http": (80, False), "https": (443, True)}
_KEYS = {key.encode(): name for key, name in PARAMETER_COMPONENTS.items()}
_SCAN = re.compile(rb'"(' + b"|".join(_KEYS) + rb')"\s*:\s*(\d+)')


class Timings:
    """Reads the server's timing parameters out of a response's JSON header, without decoding it.

    A full scan costs ~2.7 µs here (json.loads ~5 µs); so the first response whose timing
    keys sit together teaches a template of that order and spacing, and later responses try
    it first (~1.6 µs), falling back to the scan when it does not match.
    """

    def __init__(self) -> None:
        self._template: re.Pattern[bytes] | None = None
        self._names: tuple[str, ...] = ()

    def read(self, header: bytes | bytearray) -> dict[str, int]:
        """{component name: value} of the timing parameters present."""
        if self._template is not None:
            match = self._template.search(header)
            if match is not None:
                return dict(zip(self._names, map(int, match.groups()), strict=True))
        found = _SCAN.findall(header)
        if found and self._template is None:
            self._learn(bytes(header), [key for key, _ in found])
        return {_KEYS[key]: int(value) for key, value in found}

    def _learn(self, header: bytes, keys: list[bytes]) -> None:
        parts, pos = [], header.find(b'"' + keys[0] + b'"')
        for key in keys:
            match = _SCAN.match(header, header.find(b'"' + key + b'"', pos))
            if match is None:
                return
            parts += [re.escape(header[pos:match.start(2)]), rb"(\d+)"]
            pos = match.end(2)
        self._names = tuple(_KEYS[key] for key in keys)
        self._template = re.compile(b"".join(parts))


class HttpSut:
    """A `SystemUnderTest` speaking the Open Inference Protocol over HTTP/1.1."""

    def __init__(self, endpoint: Endpoint) -> None:
        e = self.endpoint = endpoint
        self.name = e.url
        self.max_in_flight = e.number("max_in_flight", e.number("connections", 64, 1), 1)
        self.connections = min(e.number("connections", 64, 1), self.max_in_flight)
        self.binary = e.flag("binary", True)
        self.outputs = e.options.get("outputs", "binary" if self.binary else "json")
        if self.outputs not in OUTPUTS:
            raise SutSpecError(f"{e.url}: outputs={self.outputs!r}: expected binary or json")
        self.timeout_ms = e.number("timeout_ms", 0)
        self.version = e.options.get("version", "")
        self.batch = e.number("batch", 8, 1)
        self.samples = e.number("samples", 1024, 1)
        self.seed = e.number("seed", 0)
        self.ssl = tls_context(e, e.flag("insecure"))
        model = f"/v2/models/{e.model}" + (f"/versions/{self.version}" if self.version else "")
        self._model_path = model
        self._headers = {"Authorization": f"Bearer {e.options['token']}"} if "token" in e.options \
            else {}
        self._sink: CompletionSink | None = None
        self._pool: HttpPool | None = None
        self._samples: Samples[bytes] | None = None
        self._prefix: dict[int, bytes] = {}
        self._timings = Timings()
        self.metadata: dict[str, Any] = {}

    @classmethod
    def from_spec(cls, spec: str) -> HttpSut:
        """Build from `http[s]://HOST[:PORT]/MODEL?key=value&...`."""
        return cls(Endpoint.parse(spec, SCHEMES, HTTP_KEYS))

    async def start(self, sink: CompletionSink, timers: Timers) -> None:
        """Check readiness, read metadata, pre-encode requests, open the connections."""
        self._sink = sink
        await self._expect_ok("/v2/health/ready", "server")
        await self._expect_ok(f"{self._model_path}/ready", f"model {self.endpoint.model!r}")
        body = await self._expect_ok(self._model_path, f"model {self.endpoint.model!r} metadata")
        try:
            self.metadata = json.loads(body)
        except ValueError as exc:
            raise SutError(f"{self.name}: model metadata is not JSON: {exc}") from None
        self._samples = Samples(metadata_inputs(self.metadata, self.endpoint.model), self.batch,
                                self.samples, self.seed, self._request)
        e = self.endpoint
        self._pool = HttpPool(e.host, e.port, self.connections, self._response, self._failure,
                              self.ssl, self.timeout_ms * 1_000_000, HEADER_LENGTH)
        try:
            await self._pool.start()
        except OSError as exc:
            raise SutError(f"{self.name}: cannot connect: {exc}") from exc

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        """Send the query (or queue it for a free connection); never blocks."""
        pool, samples = self._pool, self._samples
        assert pool is not None and samples is not None, "issue before start"
        if len(sample_indices) == 1:
            pool.submit(query_id, samples.single[int(sample_indices[0]) % samples.count])
        elif len(sample_indices) <= samples.rows:
            pool.submit(query_id, self._encode(sample_indices))
        else:
            pool.submit_job(Job(query_id, sample_indices, samples.rows, self._encode))

    def request_of(self, sample_index: int) -> bytes:
        """The whole HTTP request of a single-sample query (to feed other tools the same)."""
        assert self._samples is not None, "request_of before start"
        return self._samples.single[sample_index % self._samples.count]

    async def stop(self) -> None:
        """Close the connections; queries in flight are abandoned."""
        if self._pool is not None:
            await self._pool.close()
            self._pool = None

    def describe(self) -> dict[str, Any]:
        """Endpoint, protocol, model and how requests are sent."""
        return {"sut": self.name, "endpoint": self.endpoint.url, "protocol": "http",
                "model": self.endpoint.model, "version": self.version,
                "platform": self.metadata.get("platform", ""), "connections": self.connections,
                "max_in_flight": self.max_in_flight, "binary": self.binary,
                "outputs": self.outputs,
                "tls": self.endpoint.tls, "timeout_ms": self.timeout_ms,
                "samples_per_request": self._samples.rows if self._samples else self.batch,
                "samples": self._samples.count if self._samples else self.samples,
                "seed": self.seed}

    # -- requests ---------------------------------------------------------------------------

    async def _expect_ok(self, path: str, what: str) -> bytes:
        e = self.endpoint
        request = request_bytes("GET", path, e.address, self._headers)
        try:
            status, body = await fetch(e.host, e.port, request, self.ssl)
        except (OSError, TimeoutError, ValueError) as exc:
            raise SutError(f"{self.name}: GET {path}: {exc or type(exc).__name__}") from exc
        if status != 200:
            hint = ""
            if self.version and status in (404, 501):
                hint = f"; the server may not serve versioned URLs: drop version={self.version}"
            raise SutError(f"{self.name}: {what} is not ready (GET {path}: "
                           f"{error_detail(status, body)}){hint}")
        return body

    def _request(self, tensors: list[InferTensor]) -> bytes:
        """The whole HTTP request carrying these tensors."""
        body, headers = encode_request(InferRequest(inputs=tuple(tensors)), self.binary,
                                       self.outputs == "binary")
        return request_bytes("POST", f"{self._model_path}/infer", self.endpoint.address,
                             headers | self._headers, body)

    def _encode(self, indices: Sequence[int] | np.ndarray) -> bytes:
        """Request bytes for several samples; fixed-size binary tensors reuse a cached head."""
        samples = self._samples
        assert samples is not None
        if len(indices) == 1:
            return samples.single[indices[0] % samples.count]
        if not self.binary or any(
                s.datatype == "BYTES" for s in samples.inputs):
            return samples.payload(indices)
        picked = np.remainder(indices, samples.count)
        arrays = [samples.block[s.name][picked] for s in samples.inputs]
        prefix = self._prefix.get(len(picked))
        if prefix is None:
            whole = samples.payload(picked)
            raw = sum(a.nbytes for a in arrays)
            prefix = self._prefix[len(picked)] = whole[:len(whole) - raw]
        return prefix + b"".join(a.tobytes() for a in arrays)

    # -- completions (on the loop, from the pool) -------------------------------------------

    def _response(self, tag: Tag, status: int, buf: bytes | bytearray, start: int,
                  json_length: int, sent_ns: int, done_ns: int) -> None:
        sink = self._sink
        assert sink is not None
        if status != 200:
            report_failed(sink, tag, done_ns, f"http_{status}", error_detail(status, buf[start:]))
            return
        if buf[start:start + 1] != b"{" and bytes(buf[start:start + EXCERPT]).lstrip()[:1] != b"{":
            report_failed(sink, tag, done_ns, "protocol_error", "a 200 answer that is not an "
                          f"inference response (JSON): {bytes(buf[start:start + EXCERPT])!r}")
            return
        if type(tag) is not int and not tag[0].last_part():
            report_done(sink, tag, done_ns, None)  # a query keeps its last part's timings
            return
        header = buf[start:start + json_length] if json_length >= 0 else buf[start:]
        components = self._timings.read(header)
        total = components.get(SERVER_TOTAL)
        if total is not None:
            components["network"] = max(done_ns - sent_ns - total, 0)
        if type(tag) is int:
            sink.done(tag, done_ns, components or None)
        else:
            report_done(sink, tag, done_ns, components or None)

    def _failure(self, tag: Tag, now_ns: int, kind: str, detail: str | None) -> None:
        assert self._sink is not None
        report_failed(self._sink, tag, now_ns, kind, detail)


def error_detail(status: int, body: bytes | bytearray) -> str:
    """`HTTP 503 Service Unavailable: message`: the message of a JSON error body
    (`{"error": ...}`, or FastAPI's `{"detail": ...}`), else the body's first bytes."""
    try:
        line = f"HTTP {status} {http.HTTPStatus(status).phrase}"
    except ValueError:
        line = f"HTTP {status}"
    excerpt = bytes(body[:EXCERPT * 4])
    message: Any = None
    try:
        doc = json.loads(excerpt)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        message = doc.get("error", doc.get("detail"))
    if message is None:
        message = excerpt[:EXCERPT].decode("utf-8", "replace").strip()
    elif not isinstance(message, str):
        message = json.dumps(message)
    message = message[:EXCERPT]
    return f"{line}: {message}" if message else line
