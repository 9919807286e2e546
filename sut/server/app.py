"""Both servers over one service: bind, load the model, serve, drain on SIGTERM/SIGINT.

Order of a run: bind HTTP and gRPC (live answers at once, ready answers 503), print
one line with the bound addresses, load and warm the model, print `ready MODEL`.
On SIGTERM or SIGINT: refuse new requests (503 / UNAVAILABLE), wait up to
`drain_timeout_s` for those in flight, close both listeners, stop the service, return 0.
Connections are bounded as `sut.server.connections` says (idle, slow read, cap).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol

import grpc  # type: ignore[import-untyped]
from aiohttp import web
from prometheus_client import CollectorRegistry

from sut.metrics import SutMetrics
from sut.server.connections import ConnectionCounts, start_http
from sut.server.core import ServerConfig, ServerCore
from sut.server.grpc import make_grpc_server
from sut.server.http import make_app
from sut.service import InferenceService, build_service

__all__ = ["InferenceServer", "Servable", "announce", "serve", "serve_model"]


class InferenceServer:
    """HTTP and gRPC endpoints for one `InferenceService`, with metrics in `registry`."""

    def __init__(self, service: InferenceService, config: ServerConfig,
                 registry: CollectorRegistry | None = None) -> None:
        self.service = service
        self.config = config
        self.registry = CollectorRegistry() if registry is None else registry
        self.connections = ConnectionCounts()
        self.metrics = SutMetrics(self.registry, service, lambda: self.core.outcomes,
                                  self.connections)
        self.core = ServerCore(service, config, self.metrics.observe)
        self._runner: web.AppRunner | None = None
        self._grpc: grpc.aio.Server | None = None
        self.http_port = self.grpc_port = 0

    @property
    def model_name(self) -> str:
        """The model served."""
        return str(self.service.metadata.name)

    @property
    def banner(self) -> str:
        """`serving MODEL http=HOST:PORT grpc=HOST:PORT` (the bound ports)."""
        host = f"[{self.config.host}]" if ":" in self.config.host else self.config.host
        return (f"serving {self.service.describe()['model']} http={host}:{self.http_port}"
                f" grpc={host}:{self.grpc_port}")

    async def bind(self) -> None:
        """Listen on both ports (0: a free one); requests get 503 until `load`."""
        cfg = self.config
        self._runner = await start_http(make_app(self.core, self.registry), cfg, self.connections)
        self.http_port = int(self._runner.addresses[0][1])
        server = make_grpc_server(self.core)
        address = f"[{cfg.host}]:{cfg.grpc_port}" if ":" in cfg.host else \
            f"{cfg.host}:{cfg.grpc_port}"
        try:
            if cfg.tls_cert is not None and cfg.tls_key is not None:
                creds = grpc.ssl_server_credentials([(cfg.tls_key.read_bytes(),
                                                      cfg.tls_cert.read_bytes())])
                self.grpc_port = server.add_secure_port(address, creds)
            else:
                self.grpc_port = server.add_insecure_port(address)
        except RuntimeError as exc:
            raise OSError(f"cannot bind gRPC on {address}: address in use or invalid") from exc
        await server.start()
        self._grpc = server

    async def load(self) -> None:
        """Load, place and warm the model; the server is ready afterwards."""
        await self.service.start()

    async def start(self) -> None:
        """`bind`, then `load`."""
        await self.bind()
        await self.load()

    async def stop(self) -> None:
        """Drain (bounded), close both listeners, stop the service."""
        await self.core.drain()
        grace = self.config.drain_timeout_s
        if self._grpc is not None:
            await self._grpc.stop(grace)
        if self._runner is not None:
            await self._runner.cleanup()
        if self.service.ready:
            await self.service.stop(drain=True)


class Servable(Protocol):
    """A server `serve` runs: the OIP server, or the LLM server (`sut.llm.server`)."""

    @property
    def banner(self) -> str:
        """`serving MODEL ...` with the bound addresses, printed once bound."""

    @property
    def model_name(self) -> str:
        """The model served, printed as `ready MODEL` once loaded."""

    async def bind(self) -> None:
        """Listen; requests get 503 until `load`."""

    async def load(self) -> None:
        """Load and warm; ready afterwards."""

    async def stop(self) -> None:
        """Drain (bounded) and close."""


async def serve(server: Servable, announce: Callable[[str], None] = print,
                failed: Callable[[], Awaitable[str]] | None = None) -> int:
    """Run `server` until SIGTERM or SIGINT, then shut it down gracefully; returns 0.

    `failed`, when given, returns (a reason) once the loaded server can no longer serve: it
    is then shut down, `failed MODEL: reason` is printed to stderr, and 1 is returned."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stopped = asyncio.ensure_future(stop.wait())
    broken: asyncio.Future[str] | None = None
    try:
        await server.bind()
        announce(server.banner)
        load = asyncio.ensure_future(server.load())
        await asyncio.wait({load, stopped}, return_when=asyncio.FIRST_COMPLETED)
        await load  # a model still loading when the signal came finishes first
        if not stopped.done():
            announce(f"ready {server.model_name}")
            if failed is not None:
                broken = asyncio.ensure_future(failed())
            await asyncio.wait({stopped} | ({broken} if broken else set()),
                               return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        await server.stop()
    if broken is not None and broken.done():
        print(f"failed {server.model_name}: {broken.result()}", file=sys.stderr, flush=True)
        return 1
    if broken is not None:
        broken.cancel()
    return 0


def serve_model(model: str, options: Mapping[str, str], config: ServerConfig) -> int:
    """Build the service for `model` (as `--sut builtin:MODEL,k=v`) and serve it."""
    service = build_service(model, options)
    return asyncio.run(serve(InferenceServer(service, config), announce))


def announce(line: str) -> None:
    """Print one line of the server's progress at once (a parent process reads them)."""
    print(line, flush=True)
