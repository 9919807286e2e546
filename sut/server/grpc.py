"""Open Inference Protocol over gRPC (grpc.aio), on the `oipwire.proto` messages.

Methods take raw bytes and parse them here, so a message that is not protobuf gets
INVALID_ARGUMENT rather than grpc's generic INTERNAL. ModelInfer reads inputs from
`raw_input_contents` or from typed `contents`; outputs go back the same way the inputs
came (typed only when every output has a typed field, e.g. not FP16). A client deadline
bounds the request's wait in the queue. With a token set, every method but ServerLive
and ServerReady needs the metadata `authorization: Bearer <token>`.

Triton's extensions: ModelConfig and ModelStatistics fill Triton's messages from the
very dicts the HTTP server answers with; RepositoryIndex; ModelStreamInfer takes a
stream of ModelInferRequest and answers each with a ModelStreamInferResponse (the
response, or `error_message` and the request's id), in completion order. A stream holds
at most `max_inflight` requests that are not yet answered (back-pressure, not refusal).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeAlias

import grpc  # type: ignore[import-untyped]
from google.protobuf import json_format  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError, Message  # type: ignore[import-untyped]

import oipwire as p
from oipwire.proto import SERVICE_NAME
from oipwire.proto import grpc_predict_v2_pb2 as pb
from sut.server.core import ServerConfig, ServerCore
from sut.server.errors import Unauthorized, answer_for

__all__ = ["make_grpc_server", "request_from_pb", "response_to_pb"]

_log = logging.getLogger(__name__)
Context: TypeAlias = "grpc.aio.ServicerContext[bytes, Message]"
Impl = Callable[[Any, Context, int], Awaitable[Message]]


def _has_contents_field(datatype: str) -> bool:
    try:
        p.contents_field(datatype)
    except p.ProtocolError:
        return False
    return True


_TYPED = frozenset(filter(_has_contents_field, p.DATATYPES))


def _connection_options(config: ServerConfig) -> list[tuple[str, int]]:
    """Idle and handshake bounds, keepalive pings and the stream cap (as for HTTP,
    `sut.server.connections`; grpc core holds the connections, so no counts)."""
    return [("grpc.max_connection_idle_ms", int(config.idle_timeout_s * 1000)),
            ("grpc.server_handshake_timeout_ms", int(config.read_timeout_s * 1000)),
            ("grpc.keepalive_time_ms", 60_000),
            ("grpc.keepalive_timeout_ms", 20_000),
            ("grpc.max_concurrent_streams", config.max_streams)]


def make_grpc_server(core: ServerCore) -> grpc.aio.Server:
    """A grpc.aio server with the inference service; add a port, then start it."""
    limit = core.config.max_body_bytes
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", limit),
                                      ("grpc.max_send_message_length", -1),
                                      ("grpc.so_reuseport", 0),
                                      *_connection_options(core.config)])
    rpcs = _Rpcs(core)
    methods: list[tuple[str, type[Message], Impl, bool]] = [
        ("ServerLive", pb.ServerLiveRequest, rpcs.server_live, True),
        ("ServerReady", pb.ServerReadyRequest, rpcs.server_ready, True),
        ("ModelReady", pb.ModelReadyRequest, rpcs.model_ready, False),
        ("ServerMetadata", pb.ServerMetadataRequest, rpcs.server_metadata, False),
        ("ModelMetadata", pb.ModelMetadataRequest, rpcs.model_metadata, False),
        ("ModelInfer", pb.ModelInferRequest, rpcs.model_infer, False),
        ("ModelConfig", pb.ModelConfigRequest, rpcs.model_config, False),
        ("ModelStatistics", pb.ModelStatisticsRequest, rpcs.model_statistics, False),
        ("RepositoryIndex", pb.RepositoryIndexRequest, rpcs.repository_index, False),
    ]
    handlers = {name: _handler(core, kind, impl, open_) for name, kind, impl, open_ in methods}
    handlers["ModelStreamInfer"] = _stream_handler(core, rpcs)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME,
                                                                          handlers),))
    return server


def _handler(core: ServerCore, kind: type[Message], impl: Impl,
             open_: bool) -> grpc.RpcMethodHandler[bytes, Message]:
    async def handle(raw: bytes, context: Context) -> Message:
        began = time.perf_counter_ns()
        try:
            if not open_:
                core.authorize(_bearer(context.invocation_metadata() or ()))
            try:
                message = kind.FromString(raw)
            except DecodeError as exc:
                raise p.ProtocolError(f"malformed {kind.__name__}: {exc}") from None
            return await impl(message, context, began)
        except Exception as exc:
            answer = answer_for(exc)
            core.count(answer)
            code = grpc.StatusCode[answer.grpc_code]
            if code is grpc.StatusCode.INTERNAL:
                _log.error("%s failed", kind.__name__, exc_info=exc)
            await context.abort(code, answer.message)
            raise  # unreachable: abort raises

    return grpc.unary_unary_rpc_method_handler(
        handle, request_deserializer=None, response_serializer=_serialize)


def _stream_handler(core: ServerCore, rpcs: _Rpcs) -> grpc.RpcMethodHandler[bytes, Message]:
    """ModelStreamInfer: each request runs as its own task; answers in completion order."""

    async def handle(requests: AsyncIterator[bytes],
                     context: Context) -> AsyncIterator[pb.ModelStreamInferResponse]:
        try:
            core.authorize(_bearer(context.invocation_metadata() or ()))
        except Unauthorized as exc:
            answer = answer_for(exc)
            core.count(answer)
            await context.abort(grpc.StatusCode[answer.grpc_code], answer.message)
        answers: asyncio.Queue[pb.ModelStreamInferResponse | None] = asyncio.Queue()
        slots = asyncio.Semaphore(core.config.max_inflight)  # taken until answered
        tasks: set[asyncio.Task[None]] = set()

        async def one(raw: bytes, began: int) -> None:
            msg = pb.ModelInferRequest()
            try:
                try:
                    msg.ParseFromString(raw)
                except DecodeError as exc:
                    raise p.ProtocolError(f"malformed ModelInferRequest: {exc}") from None
                out = pb.ModelStreamInferResponse(
                    infer_response=await rpcs.model_infer(msg, context, began))
            except Exception as exc:  # noqa: BLE001 (every error becomes an answer)
                answer = answer_for(exc)
                core.count(answer)
                if answer.grpc_code == "INTERNAL":
                    _log.error("ModelStreamInfer request failed", exc_info=exc)
                out = pb.ModelStreamInferResponse(error_message=answer.message,
                                                  infer_response=pb.ModelInferResponse(
                                                      model_name=msg.model_name,
                                                      model_version=msg.model_version,
                                                      id=msg.id))
            answers.put_nowait(out)

        async def read() -> None:
            try:
                async for raw in requests:
                    began = time.perf_counter_ns()
                    await slots.acquire()
                    task = asyncio.create_task(one(raw, began))
                    tasks.add(task)
                    task.add_done_callback(tasks.discard)
                while tasks:
                    await asyncio.wait(set(tasks))
            finally:
                answers.put_nowait(None)

        reader = asyncio.create_task(read())
        try:
            while (out := await answers.get()) is not None:
                yield out
                slots.release()
        finally:
            reader.cancel()
            for task in set(tasks):
                task.cancel()

    return grpc.stream_stream_rpc_method_handler(
        handle, request_deserializer=None, response_serializer=_serialize)


def _serialize(message: Message) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def _bearer(metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
    for key, value in metadata:
        if key == "authorization":
            return value if isinstance(value, str) else value.decode("latin-1")
    return None


class _Rpcs:
    """The unary methods, over already-parsed messages."""

    def __init__(self, core: ServerCore) -> None:
        self._core = core

    async def server_live(self, msg: pb.ServerLiveRequest, context: Context,
                          began: int) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def server_ready(self, msg: pb.ServerReadyRequest, context: Context,
                           began: int) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=self._core.ready)

    async def model_ready(self, msg: pb.ModelReadyRequest, context: Context,
                          began: int) -> pb.ModelReadyResponse:
        if not self._core.ready:
            return pb.ModelReadyResponse(ready=False)
        self._core.model(msg.name, msg.version)
        return pb.ModelReadyResponse(ready=True)

    async def server_metadata(self, msg: pb.ServerMetadataRequest, context: Context,
                              began: int) -> pb.ServerMetadataResponse:
        return pb.ServerMetadataResponse(**self._core.server_metadata)

    async def model_metadata(self, msg: pb.ModelMetadataRequest, context: Context,
                             began: int) -> pb.ModelMetadataResponse:
        return pb.ModelMetadataResponse(**self._core.model_metadata(msg.name, msg.version))

    async def model_infer(self, msg: pb.ModelInferRequest, context: Context,
                          began: int) -> pb.ModelInferResponse:
        core = self._core
        meta = core.model(msg.model_name, msg.model_version)
        core.check_open()
        req, typed = request_from_pb(msg)
        resp = await core.infer(meta, req, began, context.time_remaining())
        return response_to_pb(resp, typed)

    async def model_config(self, msg: pb.ModelConfigRequest, context: Context,
                           began: int) -> pb.ModelConfigResponse:
        config = self._core.model_config(msg.name, msg.version)
        return pb.ModelConfigResponse(config=json_format.ParseDict(config, pb.ModelConfig()))

    async def model_statistics(self, msg: pb.ModelStatisticsRequest, context: Context,
                               began: int) -> pb.ModelStatisticsResponse:
        stats = self._core.model_stats(msg.name, msg.version)  # Triton's fields, and more
        reply: pb.ModelStatisticsResponse = json_format.ParseDict(
            stats, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)
        return reply

    async def repository_index(self, msg: pb.RepositoryIndexRequest, context: Context,
                               began: int) -> pb.RepositoryIndexResponse:
        return pb.RepositoryIndexResponse(models=self._core.repository_index(msg.ready))


def request_from_pb(msg: pb.ModelInferRequest) -> tuple[p.InferRequest, bool]:
    """The request, and whether its inputs came as typed contents (not raw bytes)."""
    raw = msg.raw_input_contents
    if raw and len(raw) != len(msg.inputs):
        raise p.ProtocolError(f"{len(raw)} raw_input_contents for {len(msg.inputs)} inputs")
    inputs = []
    for i, t in enumerate(msg.inputs):
        params = _params(t.parameters, f"input {t.name!r}")
        if raw:
            if t.HasField("contents"):
                raise p.ProtocolError(f"input {t.name!r}: both contents and raw_input_contents")
            inputs.append(p.tensor_from_raw(t.name, t.datatype, list(t.shape), raw[i], params))
        else:
            values = getattr(t.contents, p.contents_field(t.datatype))
            inputs.append(p.tensor_from_contents(t.name, t.datatype, list(t.shape), values,
                                                 params))
    outputs = tuple(p.RequestedOutput(o.name, None, _params(o.parameters, f"output {o.name!r}"))
                    for o in msg.outputs)
    req = p.InferRequest(msg.id, tuple(inputs), outputs, _params(msg.parameters, "request"))
    return req, bool(inputs) and not raw


def response_to_pb(resp: p.InferResponse, typed: bool) -> pb.ModelInferResponse:
    """The response message; typed contents when asked and every output has a field."""
    msg = pb.ModelInferResponse(model_name=resp.model_name, model_version=resp.model_version,
                                id=resp.id)
    for key, value in resp.parameters.items():
        setattr(msg.parameters[key], p.parameter_field(value), value)
    typed = typed and all(t.datatype in _TYPED for t in resp.outputs)
    for t in resp.outputs:
        out = msg.outputs.add(name=t.name, datatype=t.datatype, shape=t.shape)
        if typed:
            field, values = p.tensor_to_contents(t)
            getattr(out.contents, field).extend(values)
        else:
            msg.raw_output_contents.append(p.tensor_to_raw(t))
    return msg


def _params(params: Mapping[str, pb.InferParameter], ctx: str) -> dict[str, p.ParamValue]:
    out: dict[str, p.ParamValue] = {}
    for key, param in params.items():
        which = param.WhichOneof("parameter_choice")
        if which is None:
            raise p.ProtocolError(f"{ctx}: parameter {key!r} has no value")
        out[key] = getattr(param, which)
    return out
