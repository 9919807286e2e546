"""Open Inference Protocol (KServe v2 / Triton) over gRPC, on grpc.aio unary calls.

    grpc://HOST[:PORT]/MODEL[?key=value&...]      (grpcs:// for TLS; port 8001 by default)

Options (query-string keys; an unknown key is a SutSpecError naming it):

    connections=1      gRPC channels (each its own HTTP/2 connection); calls spread over them
    max_in_flight=256  calls in flight at most; later queries wait in a local FIFO
    timeout_ms=0       call deadline (0: none); an expired call fails as `timeout`
    token=T            send metadata `authorization: Bearer T`
    tls=1              TLS on a grpc:// spec; ca=FILE trusts that CA bundle (insecure=1 is
                       refused: grpc cannot skip certificate checks)
    binary=1           tensors in `raw_input_contents` (0: typed `contents` fields)
    version=V          model version (default: the server's choice)
    batch=8            samples per request at most (a larger query is split; the model's
                       first dim must be -1, else each request carries one sample)
    samples=1024       distinct synthetic samples (sample index i uses i mod samples)
    seed=0             seed of the synthetic samples

At start the adapter calls ServerReady, ModelReady and ModelMetadata, builds seeded
synthetic samples that match the metadata, serialises the ModelInferRequest of every
single-sample query (a call passes bytes through, no per-call serialisation), and warms each
channel with a few calls (grpc's first calls take tens of ms). `max_in_flight` worker
coroutines take requests from the FIFO, one call at a time each. The completion is stamped
in the response deserializer, the first Python code to see the answer. Components: the
server's timing parameters (every one of `oipwire.timing`) and `network` = service latency
- `server_total`. Failures: `grpc_<CODE>` (grpc_UNAVAILABLE when the server is down: grpc
reconnects with backoff on its own), `timeout`, `protocol_error`, each with the status code
and details as detail. Outputs are not decoded, so a server may answer typed `contents` or
`raw_output_contents` alike; unset optional fields of the metadata are simply empty.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import numpy as np

from loadgen.adapters.base import CompletionSink, Timers
from loadgen.adapters.oip import (
    COMMON_KEYS,
    Samples,
    add_network,
    metadata_inputs,
    report_done,
    report_failed,
)
from loadgen.adapters.wire.endpoint import Endpoint
from loadgen.adapters.wire.queueing import Job, Pending
from loadgen.errors import SutError, SutSpecError
from oipwire.errors import ProtocolError
from oipwire.grpc_fields import tensor_to_contents
from oipwire.proto import SERVICE_NAME
from oipwire.proto import grpc_predict_v2_pb2 as pb
from oipwire.proto import grpc_predict_v2_pb2_grpc as pb_grpc
from oipwire.tensors import InferTensor, tensor_to_raw
from oipwire.timing import PARAMETER_COMPONENTS

__all__ = ["GRPC_KEYS", "GrpcSut"]

GRPC_KEYS = (*COMMON_KEYS, "connections", "binary", "insecure")
SCHEMES = {"grpc": (8001, False), "grpcs": (8001, True)}
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1),
                   ("grpc.use_local_subchannel_pool", 1), ("grpc.enable_retries", 0),
                   ("grpc.initial_reconnect_backoff_ms", 10), ("grpc.min_reconnect_backoff_ms", 10),
                   ("grpc.max_reconnect_backoff_ms", 500)]
SETUP_TIMEOUT_S = 10.0
WARMUP_ROUNDS = 16
_INFER = f"/{SERVICE_NAME}/ModelInfer"
_NAMES = dict(PARAMETER_COMPONENTS)  # a plain dict: read per response


def _stamped(data: bytes) -> tuple[int, pb.ModelInferResponse]:
    """The response deserializer: stamp first, then parse."""
    return time.perf_counter_ns(), pb.ModelInferResponse.FromString(data)


class GrpcSut:
    """A `SystemUnderTest` speaking the Open Inference Protocol over gRPC."""

    def __init__(self, endpoint: Endpoint) -> None:
        e = self.endpoint = endpoint
        self.name = e.url
        self.connections = e.number("connections", 1, 1)
        self.binary = e.flag("binary", True)
        if e.flag("insecure"):
            raise SutSpecError(f"{e.url}: insecure=1: grpc cannot skip certificate checks; "
                               "pass ca=FILE")
        self.max_in_flight = e.number("max_in_flight", 256, 1)
        self.timeout_ms = e.number("timeout_ms", 0)
        self.version = e.options.get("version", "")
        self.batch = e.number("batch", 8, 1)
        self.samples = e.number("samples", 1024, 1)
        self.seed = e.number("seed", 0)
        self._metadata = (("authorization", f"Bearer {e.options['token']}"),) \
            if "token" in e.options else None
        self._credentials = self._tls() if e.tls else None
        self._channels: list[grpc.aio.Channel] = []
        self._workers: list[asyncio.Task[None]] = []
        self._idle: list[asyncio.Future[None]] = []
        self._pending: Pending[bytes] = Pending()
        self._samples: Samples[bytes] | None = None
        self._sink: CompletionSink | None = None
        self.platform = ""

    @classmethod
    def from_spec(cls, spec: str) -> GrpcSut:
        """Build from `grpc[s]://HOST[:PORT]/MODEL?key=value&...`."""
        return cls(Endpoint.parse(spec, SCHEMES, GRPC_KEYS))

    async def start(self, sink: CompletionSink, timers: Timers) -> None:
        """Check readiness, read metadata, pre-serialise requests, warm up, start the workers."""
        self._sink = sink
        e = self.endpoint
        self._channels = [
            grpc.aio.secure_channel(e.address, self._credentials, CHANNEL_OPTIONS)
            if self._credentials else grpc.aio.insecure_channel(e.address, CHANNEL_OPTIONS)
            for _ in range(self.connections)]
        try:
            await self._setup()
        except grpc.aio.AioRpcError as exc:
            await self.stop()
            raise SutError(f"{self.name}: {exc.code().name}: {exc.details()}") from exc
        except BaseException:
            await self.stop()
            raise

    async def _setup(self) -> None:
        e = self.endpoint
        stub = pb_grpc.GRPCInferenceServiceStub(self._channels[0])  # type: ignore[no-untyped-call]
        kw: dict[str, Any] = {"timeout": SETUP_TIMEOUT_S, "metadata": self._metadata}
        model = {"name": e.model, "version": self.version}
        if not (await stub.ServerReady(pb.ServerReadyRequest(), **kw)).ready:
            raise SutError(f"{self.name}: server is not ready")
        if not (await stub.ModelReady(pb.ModelReadyRequest(**model), **kw)).ready:
            raise SutError(f"{self.name}: model {e.model!r} is not ready")
        meta = await stub.ModelMetadata(pb.ModelMetadataRequest(**model), **kw)
        self.platform = meta.platform
        inputs = metadata_inputs({"inputs": [
            {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in meta.inputs]},
            e.model)
        self._samples = Samples(inputs, self.batch, self.samples, self.seed, self._request)
        calls = [ch.unary_unary(_INFER, request_serializer=None, response_deserializer=_stamped)
                 for ch in self._channels]
        await self._warm(calls)
        loop = asyncio.get_running_loop()
        self._workers = [loop.create_task(self._worker(calls[i % len(calls)]))
                         for i in range(self.max_in_flight)]

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        """Queue the query for the next free worker; never blocks."""
        samples, pending = self._samples, self._pending
        assert samples is not None, "issue before start"
        if len(sample_indices) == 1:
            pending.put(query_id, samples.single[int(sample_indices[0]) % samples.count])
        elif len(sample_indices) <= samples.rows:
            pending.put(query_id, samples.payload(sample_indices))
        else:
            pending.put_job(Job(query_id, sample_indices, samples.rows, samples.payload))
            while self._idle:
                _wake(self._idle.pop())
            return
        if self._idle:
            _wake(self._idle.pop())

    async def stop(self) -> None:
        """Cancel the workers and close the channels; calls in flight are abandoned."""
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._workers = []
        for channel in self._channels:
            await channel.close()
        self._channels = []

    def describe(self) -> dict[str, Any]:
        """Endpoint, protocol, model and how requests are sent."""
        s = self._samples
        return {"sut": self.name, "endpoint": self.endpoint.url, "protocol": "grpc",
                "model": self.endpoint.model, "version": self.version, "platform": self.platform,
                "connections": self.connections, "max_in_flight": self.max_in_flight,
                "binary": self.binary, "tls": self.endpoint.tls, "timeout_ms": self.timeout_ms,
                "samples_per_request": s.rows if s else self.batch,
                "samples": s.count if s else self.samples, "seed": self.seed}

    # -- internals ---------------------------------------------------------------------------

    def _tls(self) -> grpc.ChannelCredentials:
        ca = self.endpoint.options.get("ca")
        try:
            roots = Path(ca).read_bytes() if ca else None
        except OSError as exc:
            raise SutSpecError(f"{self.endpoint.url}: ca: {exc}") from None
        return grpc.ssl_channel_credentials(root_certificates=roots)

    async def _warm(self, calls: list[Any]) -> None:
        """A few rounds of calls on every channel (grpc's first calls take tens of ms); what
        they answer does not matter, the run counts its own errors."""
        assert self._samples is not None
        payload = self._samples.single[0]
        for _ in range(WARMUP_ROUNDS):
            await asyncio.gather(*(call(payload, timeout=SETUP_TIMEOUT_S, metadata=self._metadata)
                                   for call in calls), return_exceptions=True)

    def _request(self, tensors: list[InferTensor]) -> bytes:
        req = pb.ModelInferRequest(model_name=self.endpoint.model, model_version=self.version)
        for t in tensors:
            entry = req.inputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
            if self.binary:
                req.raw_input_contents.append(tensor_to_raw(t))
                continue
            try:
                field, values = tensor_to_contents(t)
            except ProtocolError as exc:
                raise SutError(f"{self.name}: binary=0: {exc}") from None
            getattr(entry.contents, field).extend(values)
        data: bytes = req.SerializeToString()
        return data

    async def _worker(self, call: Any) -> None:
        loop = asyncio.get_running_loop()
        pending, idle, sink = self._pending, self._idle, self._sink
        assert sink is not None
        timeout = self.timeout_ms / 1000 if self.timeout_ms else None
        metadata = self._metadata
        while True:
            item = pending.pop()
            if item is None:
                waiter = loop.create_future()
                idle.append(waiter)
                await waiter
                continue
            tag, payload = item
            sent = time.perf_counter_ns()
            try:
                reply = await call(payload, timeout=timeout, metadata=metadata)
            except grpc.aio.AioRpcError as exc:
                code = exc.code()
                kind = "timeout" if code is grpc.StatusCode.DEADLINE_EXCEEDED and timeout \
                    else f"grpc_{code.name}"
                report_failed(sink, tag, time.perf_counter_ns(), kind,
                              f"{code.name}: {(exc.details() or '')[:200]}")
                continue
            if reply is None:  # grpc.aio answers None when the deserializer raised
                report_failed(sink, tag, time.perf_counter_ns(), "protocol_error",
                              "response is not a ModelInferResponse")
                continue
            done, resp = reply
            components = {_NAMES[key]: value.int64_param or value.uint64_param
                          for key, value in resp.parameters.items() if key in _NAMES}
            report_done(sink, tag, done, add_network(components, done - sent))


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)

