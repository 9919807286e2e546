"""Connection hygiene for the HTTP server: idle and slow-read timeouts, a connection cap.

Each accepted connection gets a `_Guard`, an `asyncio.Protocol` in front of aiohttp's own
(`web.Server` is the protocol factory aiohttp documents for `loop.create_server`). It
closes a connection that

    idle        sent nothing for `idle_timeout_s` since it opened or since its last answer
    slow_read   has not delivered a request's head and body `read_timeout_s` after the
                request's first byte (a handler still computing is not timed here)

and refuses one beyond `max_connections` with a 503 naming the cap (`refused`). The
`watch` middleware tells the guard when a handler runs, so the guard parses no HTTP.
`ConnectionCounts` is what `/metrics` shows. gRPC connections live in grpc core: there,
`sut.server.grpc` sets the equivalent server arguments from the same `ServerConfig`.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable
from ssl import SSLContext

from aiohttp import web

from sut.server.core import ServerConfig

__all__ = ["REASONS", "ConnectionCounts", "GuardedSite", "start_http", "watch"]

REASONS = ("idle", "slow_read", "refused")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ConnectionCounts:
    """Open HTTP connections now, and those the server closed, by reason (`REASONS`)."""

    def __init__(self) -> None:
        self.open = 0
        self.closed: Counter[str] = Counter({reason: 0 for reason in REASONS})


@web.middleware
async def watch(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Tell the connection's guard that a handler runs (its read deadline then looks
    only at the body) and when it is done (the idle clock starts)."""
    transport = request.transport
    guard = transport.get_protocol() if transport is not None else None
    if not isinstance(guard, _Guard):
        return await handler(request)
    guard.handling(request)
    try:
        return await handler(request)
    finally:
        guard.handled()


class GuardedSite(web.BaseSite):
    """A TCP site whose connections each go through a `_Guard`."""

    __slots__ = ("_config", "_counts", "_host", "_port")

    def __init__(self, runner: web.BaseRunner, config: ServerConfig,
                 counts: ConnectionCounts, ssl_context: SSLContext | None = None) -> None:
        super().__init__(runner, ssl_context=ssl_context)
        self._config = config
        self._counts = counts
        self._host = config.host
        self._port = config.http_port

    @property
    def name(self) -> str:
        scheme = "https" if self._ssl_context else "http"
        return f"{scheme}://{self._host}:{self._port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        config, counts = self._config, self._counts
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Guard(server, config, counts), self._host, self._port,
            ssl=self._ssl_context, backlog=self._backlog)


class _Guard(asyncio.Protocol):
    """One connection: refuses it over the cap, or forwards to aiohttp and times it."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], config: ServerConfig,
                 counts: ConnectionCounts) -> None:
        self._factory = factory
        self._config = config
        self._counts = counts
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._request: web.Request | None = None  # the request a handler runs now
        self._reading = False  # bytes of a request came, its handler has not begun

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        cap = self._config.max_connections
        if self._counts.open >= cap:
            self._counts.closed["refused"] += 1
            body = json.dumps({"error": f"over the {cap}-connection cap; retry later"}).encode()
            transport.write(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json"
                            b"\r\nConnection: close\r\nRetry-After: 1\r\nContent-Length: "
                            + str(len(body)).encode() + b"\r\n\r\n" + body)
            transport.close()
            return
        self._counts.open += 1
        self._inner = self._factory()
        self._inner.connection_made(transport)
        self._arm(self._config.idle_timeout_s)

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if self._request is None and not self._reading:
            self._reading = True
            self._arm(self._config.read_timeout_s)
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return None if self._inner is None else self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._inner is not None:
            self._counts.open -= 1
            inner, self._inner = self._inner, None
            inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    # -- the watch middleware ----------------------------------------------------

    def handling(self, request: web.Request) -> None:
        """A handler began: the head is in; the read deadline now concerns the body."""
        self._request = request
        self._reading = False

    def handled(self) -> None:
        """The handler is done: the idle clock starts."""
        self._request = None
        self._reading = False
        if self._inner is not None:
            self._arm(self._config.idle_timeout_s)

    # -- the clock ----------------------------------------------------------------

    def _arm(self, delay_s: float) -> None:
        self._disarm()
        self._timer = asyncio.get_running_loop().call_later(delay_s, self._expired)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expired(self) -> None:
        self._timer = None
        transport = self._transport
        if transport is None or self._inner is None or transport.is_closing():
            return
        request = self._request
        if request is not None:
            if not request.content.is_eof():  # the body is still coming in
                self._close("slow_read", transport)
            return  # the handler computes; request_timeout_s bounds it
        self._close("slow_read" if self._reading else "idle", transport)

    def _close(self, reason: str, transport: asyncio.Transport) -> None:
        self._counts.closed[reason] += 1
        transport.abort() if reason == "slow_read" else transport.close()


async def start_http(app: web.Application, cfg: ServerConfig,
                     connections: ConnectionCounts,
                     cancel_on_disconnect: bool = False) -> web.AppRunner:
    """Serve `app` on `cfg`'s HTTP host and port (TLS when it names a certificate), each
    connection guarded and counted in `connections`; returns the runner (its `addresses`
    hold the bound port, its `cleanup` closes it). With `cancel_on_disconnect` a handler is
    cancelled as soon as its client goes away (aiohttp's handler cancellation)."""
    tls = None
    if cfg.tls_cert is not None and cfg.tls_key is not None:
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(cfg.tls_cert, cfg.tls_key)
    app.middlewares.append(watch)
    # aiohttp's own keep-alive close is a backstop: the guard closes (and counts) first
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=cfg.drain_timeout_s,
                           keepalive_timeout=cfg.idle_timeout_s + cfg.read_timeout_s,
                           handler_cancellation=cancel_on_disconnect)
    await runner.setup()
    try:
        await GuardedSite(runner, cfg, connections, ssl_context=tls).start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner
