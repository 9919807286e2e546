"""Serve an LLM engine over HTTP: bind, load, serve, drain on SIGTERM/SIGINT.

Order of a run, as the OIP server's: bind (health/live answers at once, ready answers 503),
print `serving MODEL http=HOST:PORT`, load and warm the engine, print `ready MODEL`. On
SIGTERM or SIGINT: refuse new requests (503), wait up to `drain_timeout_s` for streams in
flight, close the listener, stop the engine. Should the engine stop by itself (a failed loop),
readiness turns 503 at once and `serve_llm` shuts down and returns 1, so a supervisor restarts
the process. Connections are bounded as
`sut.server.connections` says; `ServerConfig`'s gRPC fields are not used.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Mapping
from types import TracebackType
from typing import Self

from aiohttp import web
from prometheus_client import CollectorRegistry

from sut.llm.config import EngineConfig, parse_engine_options
from sut.llm.engine import LLMEngine
from sut.llm.http import ServingState, make_app
from sut.llm.metrics import EngineMetrics
from sut.server.app import announce, serve
from sut.server.connections import ConnectionCounts, start_http
from sut.server.core import ServerConfig

__all__ = ["LlmServer", "LlmServerThread", "serve_llm"]


class LlmServer:
    """The HTTP endpoints of one `LLMEngine`, with metrics in `registry`."""

    def __init__(self, engine: LLMEngine, config: ServerConfig,
                 registry: CollectorRegistry | None = None) -> None:
        self.engine = engine
        self.config = config
        self.registry = CollectorRegistry() if registry is None else registry
        self.metrics = EngineMetrics(self.registry, engine)
        self.state = ServingState(config, self.registry)
        self.connections = ConnectionCounts()
        self._runner: web.AppRunner | None = None
        self.http_port = 0
        self._engine_stopped: asyncio.Future[str | None] | None = None

    @property
    def model_name(self) -> str:
        """The model served."""
        return self.engine.model_name

    @property
    def banner(self) -> str:
        """`serving MODEL http=HOST:PORT` (the bound port)."""
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return f"serving {self.engine.model_name} http={host}:{self.http_port}"

    async def bind(self) -> None:
        """Listen (port 0: a free one); requests get 503 until `load`."""
        app = make_app(self.engine, self.state, self.config.max_body_bytes)
        self._runner = await start_http(app, self.config, self.connections,
                                        cancel_on_disconnect=True)
        self.http_port = int(self._runner.addresses[0][1])

    async def load(self) -> None:
        """Start and warm the engine (in a thread); ready afterwards."""
        loop = asyncio.get_running_loop()
        stopped: asyncio.Future[str | None] = loop.create_future()
        self._engine_stopped = stopped

        def settle(failure: str | None) -> None:
            if not stopped.done():
                stopped.set_result(failure)

        def on_stopped(failure: str | None) -> None:  # on the engine thread
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(settle, failure)

        await asyncio.to_thread(self.engine.start)
        self.engine.watch(on_stopped)
        self.state.ready = True

    async def failed(self) -> str:
        """Return (the reason) once the engine has stopped by itself; never while it runs
        or after a stop that was asked for."""
        if self._engine_stopped is None:
            raise RuntimeError("failed() before load()")
        failure = await self._engine_stopped
        if failure is None:
            await asyncio.Event().wait()  # asked to stop: not a failure; wait to be cancelled
        return str(failure)

    async def stop(self) -> None:
        """Refuse new requests, wait (bounded) for those in flight, close, stop the engine."""
        self.state.draining = True
        deadline = time.monotonic() + self.config.drain_timeout_s
        while self.state.inflight and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # polling the in-flight count, bounded by the deadline
        await asyncio.to_thread(self.engine.stop)
        if self._runner is not None:
            await self._runner.cleanup()


def serve_llm(model: str, options: Mapping[str, str], config: ServerConfig) -> int:
    """Build the engine for `model` with the `key=value` knobs and serve it until a signal."""
    engine = LLMEngine.build(model, parse_engine_options(options))
    server = LlmServer(engine, config)
    return asyncio.run(serve(server, announce, server.failed))


class LlmServerThread:
    """An `LlmServer` on its own loop in a background thread (tests, benchmarks)."""

    def __init__(self, model: str, engine_config: EngineConfig, config: ServerConfig) -> None:
        self.server = LlmServer(LLMEngine.build(model, engine_config), config)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="llm-server",
                                        daemon=True)

    @property
    def url(self) -> str:
        """`http://host:port` of the bound server."""
        return f"http://{self.server.config.host}:{self.server.http_port}"

    def __enter__(self) -> Self:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.server.bind(), self._loop).result(60)
        asyncio.run_coroutine_threadsafe(self.server.load(), self._loop).result(120)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result(120)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(60)
            self._loop.close()
