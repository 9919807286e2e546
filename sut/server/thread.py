"""An `InferenceServer` on its own event loop in a background thread (tests, benchmarks).

    with ServerThread(build_service("mlp", {}), ServerConfig(http_port=0, grpc_port=0)) as s:
        urllib.request.urlopen(f"{s.http_url}/v2/health/ready")
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from prometheus_client import CollectorRegistry

from sut.server.app import InferenceServer
from sut.server.core import ServerConfig
from sut.service import InferenceService

__all__ = ["ServerThread"]

T = TypeVar("T")


class ServerThread:
    """Start binds both ports and loads the model; stop drains and joins the thread."""

    def __init__(self, service: InferenceService, config: ServerConfig,
                 registry: CollectorRegistry | None = None) -> None:
        self.server = InferenceServer(service, config, registry)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="sut-server",
                                        daemon=True)

    @property
    def http_url(self) -> str:
        """`http(s)://host:port` of the bound HTTP server."""
        scheme = "https" if self.server.config.tls_cert else "http"
        return f"{scheme}://{self._host}:{self.server.http_port}"

    @property
    def grpc_target(self) -> str:
        """`host:port` of the bound gRPC server."""
        return f"{self._host}:{self.server.grpc_port}"

    @property
    def _host(self) -> str:
        host = self.server.config.host
        return f"[{host}]" if ":" in host else host

    def call(self, coro: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        """Run a coroutine on the server's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout_s)

    def start(self, timeout_s: float = 60.0, load: bool = True) -> None:
        """Bind, load the model (unless `load` is False: see `load`), return once ready."""
        self._thread.start()
        try:
            self.call(self.server.bind(), timeout_s)
            if load:
                self.load(timeout_s)
        except BaseException:
            self.stop(timeout_s)
            raise

    def load(self, timeout_s: float = 60.0) -> None:
        """Load the model of a server started with `load=False`."""
        self.call(self.server.load(), timeout_s)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Drain, close the listeners, stop the service, end the loop and join its thread."""
        if not self._thread.is_alive():
            return
        try:
            self.call(self.server.stop(), timeout_s)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout_s)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
