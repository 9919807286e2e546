"""The LLM server's HTTP routes on aiohttp: decode, submit to the engine, stream back.

    GET  /v1/models                               the served model (OpenAI list)
    POST /v1/completions                          OpenAI completions, streamed (SSE) or not
    POST /v1/chat/completions                     OpenAI chat completions, likewise
    POST /v2/models/{m}/generate                  OIP generate: {"text_input", "parameters"}
    POST /v2/models/{m}/generate_stream           the same as SSE events with `text_output`
    GET  /v2/health/live | /v2/health/ready       200, or 503 while loading, draining or once
                                                  the engine has stopped
    GET  /health                                  vLLM's probe: 200 with an empty body while
                                                  ready, else 503
    GET  /metrics                                 Prometheus text (vLLM's names)
    GET  /debug/steps?last=N                      the engine's per-step trace (JSON)

A stream is `data: {json}\\n\\n` events: for chat first the role chunk, then content chunks,
the one with `finish_reason` carrying the server's `timings` (queue, prefill, decode ns and
token counts), with `stream_options.include_usage` a usage chunk with `choices: []`, and
`data: [DONE]` (not for OIP). An error before the stream is a 4xx/5xx JSON
`{"error": {"message", "type", "code"}}`; one during it an in-band `data: {"error": {...}}`.
With a token set, every path but the health checks needs `Authorization: Bearer <token>`
(a header that is not ASCII is a 401 and one log line).

Fail closed: every field is checked before the engine sees it (`sut.llm.protocol`); a body over
`_OFF_LOOP_BYTES` is decoded and tokenised on a worker thread, not on the event loop; JSON
nested too deep is a 400. At most `max_inflight` requests run at once (one more: 429), each for
at most `request_timeout_s` when set (then 504, or an in-band error once streaming; None, what
`loadgen serve` gives an LLM unless told, bounds nothing, as in vLLM and SGLang). A client that goes
away cancels its request on every route (the app runs with aiohttp's handler cancellation), and
its KV blocks are freed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import itertools
import json
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from sut.errors import InvalidInput, SutError
from sut.llm import checks
from sut.llm.engine import LLMEngine
from sut.llm.protocol import Generation, WireFormat, parse_generate, parse_openai
from sut.llm.sequence import Delta
from sut.llm.streams import RequestStream
from sut.server.core import ServerConfig
from sut.server.errors import (
    Busy,
    NotFound,
    ServerTimeout,
    Unauthorized,
    Unavailable,
    answer_for,
)

__all__ = ["ENGINE", "STATE", "ServingState", "make_app"]

_OPEN = frozenset({"/v2/health/live", "/v2/health/ready", "/health"})
_OFF_LOOP_BYTES = 64 * 2**10  # a body this big is parsed and tokenised on a worker thread
_log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ServingState:
    """Readiness, draining, the bearer token and the request bounds of `config`, requests in
    flight, the metrics registry."""

    def __init__(self, config: ServerConfig, registry: CollectorRegistry) -> None:
        token = config.auth_token
        self.token = None if token is None else f"Bearer {token}".encode()
        self.max_inflight = config.max_inflight
        self.request_timeout_s = config.request_timeout_s
        self.registry = registry
        self.ready = False
        self.draining = False
        self.inflight = 0
        self.ids = itertools.count(1)


ENGINE = web.AppKey("engine", LLMEngine)
STATE = web.AppKey("state", ServingState)


def make_app(engine: LLMEngine, state: ServingState, max_body_bytes: int) -> web.Application:
    """The aiohttp application over `engine`."""
    app = web.Application(client_max_size=max_body_bytes, middlewares=[_guard])
    app[ENGINE], app[STATE] = engine, state
    router = app.router
    router.add_get("/v2/health/live", _live)
    router.add_get("/v2/health/ready", _ready)
    router.add_get("/health", _health)
    router.add_get("/v1/models", _models)
    router.add_post("/v1/completions", _completions)
    router.add_post("/v1/chat/completions", _chat)
    router.add_post("/v2/models/{model}/generate", _generate)
    router.add_post("/v2/models/{model}/generate_stream", _generate_stream)
    router.add_get("/metrics", _metrics)
    router.add_get("/debug/steps", _steps)
    return app


def _error_body(status: int, message: str) -> dict[str, Any]:
    kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError",
            405: "MethodNotAllowedError", 413: "RequestTooLargeError", 429: "RateLimitError",
            503: "ServiceUnavailableError", 504: "TimeoutError"}.get(status,
                                                                      "InternalServerError")
    return {"error": {"message": message, "type": kind, "code": status}}


@web.middleware
async def _guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Check the bearer token; turn every error before a stream into a JSON answer."""
    state = request.app[STATE]
    try:
        if request.path not in _OPEN and state.token is not None:
            _authorize(request.headers.get("Authorization") or "", state.token)
        return await handler(request)
    except web.HTTPException as exc:  # the router's 404 and 405
        return web.json_response(_error_body(exc.status, f"{exc.reason}: {request.method}"
                                                         f" {request.path}"), status=exc.status)
    except Exception as exc:  # noqa: BLE001 (every error becomes an answer)
        answer = answer_for(exc)
        if answer.http_status == 500:
            _log.error("%s %s failed", request.method, request.path, exc_info=exc)
        headers = {"WWW-Authenticate": "Bearer"} if answer.http_status == 401 else None
        return web.json_response(_error_body(answer.http_status, answer.message),
                                 status=answer.http_status, headers=headers)


def _authorize(header: str, token: bytes) -> None:
    try:
        given = header.encode("ascii")
    except UnicodeEncodeError:
        _log.warning("refused a request whose Authorization header is not ASCII")
        raise Unauthorized("missing or wrong bearer token") from None
    if not hmac.compare_digest(given, token):
        raise Unauthorized("missing or wrong bearer token")


async def _live(request: web.Request) -> web.Response:
    return web.json_response({"live": True})


async def _ready(request: web.Request) -> web.Response:
    _check_open(request.app)
    return web.json_response({"ready": True})


async def _health(request: web.Request) -> web.Response:
    _check_open(request.app)
    return web.Response()


def _check_open(app: web.Application) -> None:
    state, engine = app[STATE], app[ENGINE]
    if state.draining:
        raise Unavailable("the server is shutting down")
    if not state.ready:
        raise Unavailable("the model is not loaded yet")
    if not engine.alive:
        raise Unavailable(f"the engine has stopped: {engine.failure or 'stopped'}")


async def _models(request: web.Request) -> web.Response:
    engine = request.app[ENGINE]
    return web.json_response({"object": "list", "data": [{
        "id": engine.model_name, "object": "model", "created": 0, "owned_by": "loadgen",
        "max_model_len": engine.max_model_len}]})


async def _metrics(request: web.Request) -> web.Response:
    return web.Response(body=generate_latest(request.app[STATE].registry),
                        headers={"Content-Type": CONTENT_TYPE_LATEST})


async def _steps(request: web.Request) -> web.Response:
    try:
        last = int(request.query.get("last", "100"))
    except ValueError:
        raise InvalidInput("last: want an integer") from None
    trace = list(request.app[ENGINE].trace)
    return web.json_response({"steps": trace[-last:] if last > 0 else []})


async def _parsed(request: web.Request, parse: Callable[[Any], Generation]) -> Generation:
    """The body decoded and parsed by `parse`; on a worker thread when it is big."""
    raw = await request.read()
    if len(raw) > _OFF_LOOP_BYTES:
        return await asyncio.to_thread(_decode_and_parse, raw, parse)
    return _decode_and_parse(raw, parse)


def _decode_and_parse(raw: bytes, parse: Callable[[Any], Generation]) -> Generation:
    try:
        body = json.loads(raw)
    except ValueError:  # json.JSONDecodeError, UnicodeDecodeError
        raise InvalidInput("the body is not JSON") from None
    except RecursionError:
        raise InvalidInput("the body is JSON nested too deep") from None
    return parse(body)


def _check_model(engine: LLMEngine, name: Any) -> None:
    if name is not None and name != engine.model_name:
        raise NotFound(f"the model {checks.shown(name)} does not exist; this server has"
                       f" {engine.model_name!r}")


async def _completions(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=False)


async def _chat(request: web.Request) -> web.StreamResponse:
    return await _openai(request, chat=True)


async def _openai(request: web.Request, chat: bool) -> web.StreamResponse:
    engine, state = request.app[ENGINE], request.app[STATE]
    _check_open(request.app)

    def parse(body: Any) -> Generation:
        _check_model(engine, body.get("model") if isinstance(body, dict) else None)
        return parse_openai(body, chat, engine.max_model_len)

    with _slot(state):
        generation = await _parsed(request, parse)
        prefix = "chatcmpl" if chat else "cmpl"
        wire = WireFormat("chat" if chat else "completions", engine.model_name,
                          f"{prefix}-{next(state.ids)}")
        return await _answer(request, generation, wire)


async def _generate(request: web.Request) -> web.StreamResponse:
    return await _oip(request, stream=False)


async def _generate_stream(request: web.Request) -> web.StreamResponse:
    return await _oip(request, stream=True)


async def _oip(request: web.Request, stream: bool) -> web.StreamResponse:
    engine, state = request.app[ENGINE], request.app[STATE]
    _check_model(engine, request.match_info["model"])
    _check_open(request.app)
    with _slot(state):
        generation = await _parsed(
            request, lambda body: parse_generate(body, stream, engine.max_model_len))
        return await _answer(request, generation,
                             WireFormat("generate", engine.model_name, str(next(state.ids))))


async def _answer(request: web.Request, generation: Generation,
                  wire: WireFormat) -> web.StreamResponse:
    state = request.app[STATE]
    stream = RequestStream(request.app[ENGINE], generation)  # Overloaded: 429 before a byte
    if generation.stream:
        return await _stream(request, stream, generation, wire)
    parts: list[str] = []
    last: Delta | None = None
    try:
        async with asyncio.timeout(state.request_timeout_s), \
                contextlib.aclosing(stream.deltas()) as deltas:  # leaving cancels
            async for delta in deltas:
                parts.append(delta.text)
                last = delta
    except TimeoutError:
        raise ServerTimeout(f"no result within {state.request_timeout_s} s") from None
    assert last is not None
    if last.error is not None:
        raise SutError(f"generation failed: {last.error}")
    return web.json_response(wire.whole("".join(parts), last),
                             headers={"X-Request-Id": wire.id})


@contextlib.contextmanager
def _slot(state: ServingState) -> Iterator[None]:
    """Hold one of the `max_inflight` places from the body's read to the answer's end."""
    if state.inflight >= state.max_inflight:
        raise Busy(f"{state.inflight} requests in flight (max {state.max_inflight})")
    state.inflight += 1
    try:
        yield
    finally:
        state.inflight -= 1


def _event(payload: dict[str, Any] | str) -> bytes:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n".encode()


async def _stream(request: web.Request, stream: RequestStream, generation: Generation,
                  wire: WireFormat) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           "X-Request-Id": wire.id})
    await response.prepare(request)
    timeout_s = request.app[STATE].request_timeout_s
    try:
        if wire.kind == "chat":
            await response.write(_event(wire.role_chunk()))
        try:
            async with asyncio.timeout(timeout_s), \
                    contextlib.aclosing(stream.deltas()) as deltas:  # closing early cancels
                async for delta in deltas:
                    await _write_delta(response, delta, generation, wire)
        except TimeoutError:
            await response.write(_event(_error_body(504, f"no result within {timeout_s} s")))
        if wire.kind != "generate":
            await response.write(_event("[DONE]"))
        await response.write_eof()
    except ConnectionResetError:  # the client went away; its request is cancelled
        pass
    return response


async def _write_delta(response: web.StreamResponse, delta: Delta, generation: Generation,
                       wire: WireFormat) -> None:
    if delta.error is not None:
        await response.write(_event({"error": {
            "message": f"generation failed: {delta.error}", "type": "InternalServerError",
            "code": 500}}))
        return
    await response.write(_event(wire.chunk(delta, generation.continuous_usage)))
    if delta.finished and generation.include_usage and wire.kind != "generate":
        await response.write(_event(wire.usage_chunk(delta)))
