"""What the HTTP and gRPC servers share: settings, readiness, checks, the in-flight gate.

Neither aiohttp nor grpc is imported here. `ServerCore.infer` takes a decoded
`InferRequest`, checks it against the model metadata (names, datatypes, shapes;
the codec has already checked byte lengths), submits it to the service and
returns the `InferResponse` with the server's timings in its parameters: every
component of `oipwire.timing` (the one vocabulary loadgen reads too), as `<name>_ns`,
and `batch_size`. All come from the service, per request, except `server_total_ns`,
which the server measures itself: handler entry -> response about to be encoded.

Request parameters honoured: `priority` (int >= 0, lower runs first) and
`timeout` (int, microseconds a request may wait in the queue; Triton's name).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hmac
import importlib.metadata
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import oipwire as p
from oipwire import timing
from sut.errors import ConfigError, InvalidInput
from sut.server import triton
from sut.server.errors import (
    Answer,
    Busy,
    NotFound,
    ServerTimeout,
    Unauthorized,
    Unavailable,
)

if TYPE_CHECKING:
    from sut.service import InferenceService, InferResult, ModelMetadata

__all__ = ["DEFAULT_MAX_BODY_BYTES", "SERVER_NAME", "ServerConfig", "ServerCore"]

SERVER_NAME = "loadgen-sut"
_log = logging.getLogger(__name__)
DEFAULT_MAX_BODY_BYTES = 64 * 2**20


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Where and how to serve; port 0 picks a free port."""

    host: str = "127.0.0.1"
    http_port: int = 8000
    grpc_port: int = 8001
    auth_token: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_inflight: int = 1024  # infer requests held at once, over both protocols
    request_timeout_s: float | None = 60.0  # longest wait for a result; None: no bound
    drain_timeout_s: float = 30.0  # longest wait for in-flight requests at shutdown
    idle_timeout_s: float = 60.0  # a connection silent this long is closed (HTTP and gRPC)
    read_timeout_s: float = 30.0  # a request's head and body arrive within this of its
    #                               first byte (HTTP); the gRPC handshake likewise
    max_connections: int = 4096  # HTTP connections open at once; more get a 503 and closed
    max_streams: int = 4096  # concurrent gRPC streams per connection

    def __post_init__(self) -> None:
        problems = self._problems()
        if problems:
            raise ValueError("; ".join(problems))

    def _problems(self) -> list[str]:
        out: list[str] = []
        for key in ("http_port", "grpc_port"):
            if not 0 <= getattr(self, key) <= 65535:
                out.append(f"{key} must be in [0, 65535], got {getattr(self, key)}")
        for key in ("max_body_bytes", "max_inflight", "request_timeout_s", "drain_timeout_s",
                    "idle_timeout_s", "read_timeout_s", "max_connections", "max_streams"):
            value = getattr(self, key)
            if value is not None and value <= 0:
                out.append(f"{key} must be > 0, got {getattr(self, key)}")
        for key in ("idle_timeout_s", "read_timeout_s"):
            if getattr(self, key) > 86_400:
                out.append(f"{key} must be at most 86400 (one day), got {getattr(self, key)}")
        if (self.tls_cert is None) != (self.tls_key is None):
            out.append("TLS needs both a certificate and a key")
        if self.auth_token is not None and not self.auth_token.strip():
            out.append("the auth token must not be empty")
        return out


class ServerCore:
    """One served model: readiness, auth, request checks and the path to the service."""

    def __init__(self, service: InferenceService, config: ServerConfig,
                 observe: Callable[[str, InferResult], None] | None = None) -> None:
        self.service = service
        self._observe = observe
        self.config = config
        self.draining = False
        self.inflight = 0
        self.outcomes: Counter[str] = Counter()  # answers the service did not count itself
        self._token = None if config.auth_token is None else f"Bearer {config.auth_token}".encode()
        try:
            version = importlib.metadata.version("loadgen")
        except importlib.metadata.PackageNotFoundError:
            version = "0"
        self.server_metadata = p.server_metadata(SERVER_NAME, version)

    # -- state ---------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """The model is loaded and the server is not draining."""
        return self.service.ready and not self.draining

    def check_open(self) -> None:
        """Raise Unavailable once the server drains."""
        if self.draining:
            raise Unavailable("the server is shutting down; not taking new requests")

    def count(self, answer: Answer) -> None:
        """Count an error answer the service did not count itself."""
        if answer.outcome:
            self.outcomes[answer.outcome] += 1

    def authorize(self, header: str | None) -> None:
        """Raise Unauthorized unless `header` is `Bearer <token>` (or auth is off)."""
        if self._token is None:
            return
        try:
            given = (header or "").encode("ascii")
        except UnicodeEncodeError:
            _log.warning("refused a request whose Authorization header is not ASCII")
            given = b""
        if not hmac.compare_digest(given, self._token):
            raise Unauthorized("missing or wrong bearer token (Authorization: Bearer <token>)")

    def model(self, name: str, version: str = "") -> ModelMetadata:
        """The metadata of the served model; NotFound for another name or version."""
        if not self.service.ready:
            raise Unavailable("the model is not loaded yet" if not self.draining
                              else "the server is shutting down")
        meta = self.service.metadata
        if name != meta.name:
            raise NotFound(f"unknown model {name!r}; this server serves {meta.name!r}")
        if version and version not in meta.versions:
            raise NotFound(f"model {name!r} has no version {version!r};"
                           f" versions: {', '.join(meta.versions)}")
        return meta

    def model_metadata(self, name: str, version: str = "") -> dict[str, Any]:
        """The OIP model metadata document (also gRPC kwargs)."""
        m = self.model(name, version)
        return p.model_metadata(m.name, m.versions, m.platform, m.inputs, m.outputs)

    def model_stats(self, name: str, version: str = "") -> dict[str, Any]:
        """Per-model statistics (Triton's layout, plus rejected, timeout and queue depth);
        no name means every model (Triton's rule), here the one served."""
        meta = self.model(name or (self.service.metadata.name if self.service.ready else ""),
                          version)
        s = self.service.stats()
        r = s["requests"]
        return {"model_stats": [{
            "name": meta.name, "version": meta.versions[0],
            "inference_count": s["rows_ok"], "execution_count": s["batches"],
            "queue_depth": s["waiting"],
            "inference_stats": {
                "success": {"count": r["ok"]}, "fail": {"count": r["failed"]},
                "rejected": {"count": r["rejected"]}, "timeout": {"count": r["timeout"]},
                "queue": {"count": r["ok"], "ns": s["queue_ns_total"]},
                "compute_infer": {"count": s["batches"], "ns": s["compute_ns_total"]},
            },
            "batch_stats": [{"batch_size": size, "compute_infer": {"count": count}}
                            for size, count in s["batch_sizes"].items()],
        }]}

    def model_config(self, name: str, version: str = "") -> dict[str, Any]:
        """The model configuration in Triton's JSON shape (`sut.server.triton`)."""
        meta = self.model(name, version)
        described = self.service.describe()
        devices = described["device"]  # workers go round-robin over the devices
        workers = [devices[i % len(devices)] for i in range(described["workers"])]
        return triton.model_config(meta, self.service.batcher_config, workers)

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        """Triton's repository index: the served model's versions and their state."""
        if self.service.ready:
            meta = self.service.metadata
            return triton.repository_index(meta.name, meta.versions, self.ready,
                                           "the server is shutting down", ready_only)
        return triton.repository_index(self.service.describe()["model"], ("1",), False,
                                       "the model is not loaded", ready_only)

    def batcher_knobs(self, name: str, version: str = "") -> dict[str, Any]:
        """The model's batcher knobs in force."""
        self.model(name, version)
        return dataclasses.asdict(self.service.batcher_config)

    def retune(self, name: str, version: str, knobs: Any) -> dict[str, Any]:
        """Change batcher knobs live from a decoded JSON object; the knobs now in force.

        InvalidInput names an unknown knob or a bad value; nothing changes then.
        """
        self.model(name, version)
        if not isinstance(knobs, dict) or not knobs:
            raise InvalidInput('want a JSON object of batcher knobs, such as '
                               '{"max_queue_delay_us": 500}')
        try:
            return dataclasses.asdict(self.service.configure(**knobs))
        except ConfigError as exc:
            raise InvalidInput(str(exc)) from None

    # -- inference -----------------------------------------------------------

    async def infer(self, meta: ModelMetadata, req: p.InferRequest, began_ns: int,
                    deadline_s: float | None = None) -> p.InferResponse:
        """Check, submit, await and wrap one request; `deadline_s` is the client's, if any."""
        self.check_open()
        inputs = check_inputs(meta, req)
        wanted = _requested(meta, req)
        priority, timeout_ns = _knobs(req, deadline_s)
        if self.inflight >= self.config.max_inflight:
            raise Busy(f"{self.inflight} requests in flight (max {self.config.max_inflight})")
        self.inflight += 1
        try:
            async with asyncio.timeout(self.config.request_timeout_s):
                result = await self.service.infer(inputs, priority=priority, timeout_ns=timeout_ns)
        except TimeoutError:
            raise ServerTimeout(f"no result within {self.config.request_timeout_s} s") from None
        finally:
            self.inflight -= 1
        if self._observe is not None:
            self._observe(meta.name, result)
        params: dict[str, p.ParamValue] = {
            **timing.timing_parameters(result.timings_ns, result.batch_size)}
        outputs = tuple(p.InferTensor(s.name, s.datatype, result.outputs[s.name].shape,
                                      result.outputs[s.name]) for s in meta.outputs
                        if wanted is None or s.name in wanted)
        params[p.SERVER_TOTAL_NS] = time.perf_counter_ns() - began_ns  # the server's own
        return p.InferResponse(meta.name, meta.versions[0], req.id, outputs, params)

    async def drain(self) -> bool:
        """Refuse new requests; wait (bounded) until none is in flight; True when none is."""
        self.draining = True
        give_up = time.monotonic() + self.config.drain_timeout_s
        while self.inflight and time.monotonic() < give_up:
            await asyncio.sleep(0.01)
        return self.inflight == 0


def check_inputs(meta: ModelMetadata, req: p.InferRequest) -> dict[str, np.ndarray]:
    """The request's arrays, once names, datatypes and shapes match the model metadata."""
    specs = {s.name: s for s in meta.inputs}
    names = [t.name for t in req.inputs]
    if sorted(names) != sorted(specs):
        raise InvalidInput(f"model {meta.name!r} takes inputs {sorted(specs)}, got {names}")
    for t in req.inputs:
        spec = specs[t.name]
        if t.datatype != spec.datatype:
            raise InvalidInput(f"input {t.name!r}: datatype {t.datatype}, the model takes"
                               f" {spec.datatype}")
        if len(t.shape) != len(spec.shape) or any(
                want not in (-1, got) for want, got in zip(spec.shape, t.shape, strict=True)):
            raise InvalidInput(f"input {t.name!r}: shape {list(t.shape)} does not match"
                               f" {list(spec.shape)} (-1: any size)")
    return {t.name: t.data for t in req.inputs}


def _requested(meta: ModelMetadata, req: p.InferRequest) -> set[str] | None:
    if not req.outputs_requested:
        return None
    known = {s.name for s in meta.outputs}
    wanted = {o.name for o in req.outputs_requested}
    if not wanted <= known:
        raise InvalidInput(f"unknown outputs {sorted(wanted - known)}; the model has"
                           f" {sorted(known)}")
    return wanted


def _knobs(req: p.InferRequest, deadline_s: float | None) -> tuple[int, int | None]:
    priority = req.parameters.get("priority", 0)
    if type(priority) is not int or priority < 0:
        raise InvalidInput(f"parameter 'priority' must be an integer >= 0, got {priority!r}")
    timeout_us = req.parameters.get("timeout")
    if timeout_us is not None and (type(timeout_us) is not int or timeout_us <= 0):
        raise InvalidInput(f"parameter 'timeout' must be microseconds > 0, got {timeout_us!r}")
    timeout_ns = None if timeout_us is None else timeout_us * 1000
    if deadline_s is not None:
        left = max(1, int(deadline_s * 1e9))
        timeout_ns = left if timeout_ns is None else min(timeout_ns, left)
    return priority, timeout_ns
