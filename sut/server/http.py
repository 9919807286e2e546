"""Open Inference Protocol over HTTP/REST on aiohttp: decode, submit, encode.

    GET  /v2/health/live | /v2/health/ready       200, or 503 while loading or draining
    GET  /v2                                      server metadata
    GET  /v2/models/{m}[/versions/{v}]            model metadata
    GET  /v2/models/{m}[/versions/{v}]/ready      200 {"name", "ready": true}
    POST /v2/models/{m}[/versions/{v}]/infer      JSON and binary tensor data
    GET  /v2/models[/{m}[/versions/{v}]]/stats    per-model statistics (no name: all models)
    GET  /v2/models/{m}[/versions/{v}]/config     model configuration (Triton's JSON)
    POST /v2/repository/index                     [{"name", "version", "state"}]; body
                                                  optional: {"ready": true} for ready only
    GET  /v2/models/{m}[/versions/{v}]/batcher    the batcher knobs in force
    POST /v2/models/{m}[/versions/{v}]/batcher    retune knobs live: a JSON object of
                                                  knob -> value; answers the knobs in force
    GET  /metrics                                 Prometheus text

Every error is `{"error": message}` with the status `sut.server.errors` gives. JSON answers
are strict: an output holding NaN or infinity is a 500 naming it unless sent as binary data. With a
token set, every path but the two health checks needs `Authorization: Bearer <token>`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

import oipwire as p
from sut.errors import InvalidInput, SutError
from sut.server.core import ServerCore
from sut.server.errors import PayloadTooLarge, Unavailable, answer_for

__all__ = ["CORE", "REGISTRY", "make_app"]

CORE = web.AppKey("core", ServerCore)
REGISTRY = web.AppKey("registry", CollectorRegistry)

_OPEN = frozenset({"/v2/health/live", "/v2/health/ready"})
_log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def make_app(core: ServerCore, registry: CollectorRegistry) -> web.Application:
    """The aiohttp application; bodies over `max_body_bytes` are refused with 413."""
    app = web.Application(client_max_size=core.config.max_body_bytes, middlewares=[_guard])
    app[CORE] = core
    app[REGISTRY] = registry
    router = app.router
    router.add_get("/v2/health/live", _live)
    router.add_get("/v2/health/ready", _ready)
    router.add_get("/v2", _server_metadata)
    router.add_get("/v2/models/stats", _stats)  # before /v2/models/{model}
    for base in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        router.add_get(base, _model_metadata)
        router.add_get(f"{base}/ready", _model_ready)
        router.add_post(f"{base}/infer", _infer)
        router.add_get(f"{base}/stats", _stats)
        router.add_get(f"{base}/config", _model_config)
        router.add_get(f"{base}/batcher", _batcher_knobs)
        router.add_post(f"{base}/batcher", _retune)
    router.add_post("/v2/repository/index", _repository_index)
    router.add_get("/metrics", _metrics)
    return app


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=p.error_body(message), headers={
        "Content-Type": p.JSON_CONTENT_TYPE, **(headers or {})})


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Check the bearer token; turn every error into a JSON error answer."""
    core = request.app[CORE]
    try:
        if request.path not in _OPEN:
            core.authorize(request.headers.get("Authorization"))
        return await handler(request)
    except web.HTTPException as exc:  # the router's 404 and 405
        allow = exc.headers.get("Allow")
        message = f"{exc.reason}: {request.method} {request.path}"
        return _error(exc.status, message, {"Allow": allow} if allow else None)
    except Exception as exc:  # noqa: BLE001 (every error becomes an answer)
        answer = answer_for(exc)
        core.count(answer)
        if answer.http_status >= 500 and answer.http_status not in (503, 504):
            _log.error("%s %s failed", request.method, request.path, exc_info=exc)
        extra = {"WWW-Authenticate": "Bearer"} if answer.http_status == 401 else None
        return _error(answer.http_status, answer.message, extra)


async def _live(request: web.Request) -> web.Response:
    return web.json_response({"live": True})


async def _ready(request: web.Request) -> web.Response:
    core = request.app[CORE]
    if not core.ready:
        raise Unavailable("the server is shutting down" if core.draining
                          else "the model is not loaded yet")
    return web.json_response({"ready": True})


async def _server_metadata(request: web.Request) -> web.Response:
    return web.json_response(request.app[CORE].server_metadata)


def _named(request: web.Request) -> tuple[str, str]:
    """The model and version a model path names; version "" when the path has none."""
    info = request.match_info
    return info.get("model", ""), info.get("version", "")


async def _model_metadata(request: web.Request) -> web.Response:
    return web.json_response(request.app[CORE].model_metadata(*_named(request)))


async def _model_ready(request: web.Request) -> web.Response:
    meta = request.app[CORE].model(*_named(request))
    return web.json_response({"name": meta.name, "ready": True})


async def _stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[CORE].model_stats(*_named(request)))


async def _model_config(request: web.Request) -> web.Response:
    return web.json_response(request.app[CORE].model_config(*_named(request)))


async def _repository_index(request: web.Request) -> web.Response:
    body = await request.read()
    options = _json(body) if body.strip() else {}
    ready = options.get("ready", False) if isinstance(options, dict) else None
    if not isinstance(ready, bool):
        raise InvalidInput('want an empty body or a JSON object such as {"ready": true}')
    return web.json_response(request.app[CORE].repository_index(ready))


async def _batcher_knobs(request: web.Request) -> web.Response:
    return web.json_response(request.app[CORE].batcher_knobs(*_named(request)))


async def _retune(request: web.Request) -> web.Response:
    knobs = _json(await request.read())
    return web.json_response(request.app[CORE].retune(*_named(request), knobs))


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:  # json.JSONDecodeError, UnicodeDecodeError
        raise InvalidInput("the body is not JSON") from None
    except RecursionError:
        raise InvalidInput("the body is JSON nested too deep") from None


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(request.app[REGISTRY]),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _infer(request: web.Request) -> web.Response:
    began = time.perf_counter_ns()
    core = request.app[CORE]
    meta = core.model(*_named(request))
    core.check_open()
    limit = core.config.max_body_bytes
    if (request.content_length or 0) > limit:
        raise PayloadTooLarge(f"body of {request.content_length} bytes is over the"
                              f" {limit}-byte bound")
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"body is over the {limit}-byte bound") from None
    req = p.decode_request(body, request.headers.get(p.HEADER_LENGTH))
    resp = await core.infer(meta, req, began)
    binary = p.binary_outputs_requested(req)
    _check_finite(resp, binary)
    data, headers = p.encode_response(resp, binary)
    return web.Response(body=data, headers=headers)


def _check_finite(resp: p.InferResponse, binary: AbstractSet[str] | bool) -> None:
    """JSON has no NaN or infinity (strict parsers refuse them): an output that holds one and
    would travel as JSON is a clear error instead; as binary data it travels as it is."""
    for tensor in resp.outputs:
        as_binary = binary if isinstance(binary, bool) else tensor.name in binary
        if not as_binary and tensor.data.dtype.kind in "fc" \
                and not np.isfinite(tensor.data).all():
            raise SutError(f"output {tensor.name!r} holds NaN or infinity, which JSON cannot"
                           " carry; ask for it as binary data (binary_data_output)")
