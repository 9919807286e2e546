"""Open Inference Protocol over gRPC (grpc.aio), on the `oipwire.proto` messages.

Methods take raw bytes and parse them here, so a message that is not protobuf gets
INVALID_ARGUMENT rather than grpc's generic INTERNAL. ModelInfer reads inputs from
`raw_input_contents` or from typed `contents`; outputs go back the same way the inputs
came (typed only when every output has a typed field, e.g. not FP16). A client deadline
bounds the request's wait in the queue. With a token set, every method but ServerLive
and ServerReady needs the metadata `authorization: Bearer <token>`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeAlias

import grpc  # type: ignore[import-untyped]
from google.protobuf.message import DecodeError, Message  # type: ignore[import-untyped]

import oipwire as p
from oipwire.proto import SERVICE_NAME
from oipwire.proto import grpc_predict_v2_pb2 as pb
from sut.server.core import ServerConfig, ServerCore
from sut.server.errors import answer_for

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
    ]
    handlers = {name: _handler(core, kind, impl, open_) for name, kind, impl, open_ in methods}
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


def _serialize(message: Message) -> bytes:
    return message.SerializeToString()


def _bearer(metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
    for key, value in metadata:
        if key == "authorization":
            return value if isinstance(value, str) else value.decode("latin-1")
    return None


class _Rpcs:
    """The six methods, over already-parsed messages."""

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
