"""Runs of an OIP adapter (HTTP or gRPC) through the engine, for the functional tests: the
settings they share, one bounded run, and each wire's spec and error names (`WIRES`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadgen.adapters.base import SystemUnderTest
from loadgen.adapters.grpc import GrpcSut
from loadgen.adapters.http import HttpSut
from loadgen.api import run_async, run_loop
from loadgen.plan.settings import load_settings
from tests.oipwire.oip_echo import Echo

__all__ = ["COMPONENTS", "OFFLINE", "SERVER", "WIRES", "Wire", "as_dict", "run"]

SERVER = ["preset='dev'", "target_qps=500", "target_latency_ms=100", "warmup_s=0.5",
          "min_duration_s=1", "min_query_count=200", "max_issue_lag_ms=25"]
OFFLINE = ["preset='dev'", "scenario='Offline'", "target_qps=10000", "min_duration_s=1",
           "min_query_count=1"]
COMPONENTS = {"network", "queue", "batch_formation", "compute", "server_total"}


class _After:
    """A run monitor that calls `action()` once the run has seen `completions` measured
    queries complete (so past the warm-up, with that many answered), whatever the host's speed."""

    def __init__(self, action: Callable[[], object], completions: int = 20) -> None:
        self.action = action
        self.completions = completions
        self._check: asyncio.TimerHandle | None = None

    def start(self, settings: Any, sut: Any, collector: Any) -> None:
        loop = asyncio.get_running_loop()

        def check() -> None:
            if collector.measured_queries >= self.completions:
                self.action()
            else:
                self._check = loop.call_later(0.002, check)

        self._check = loop.call_later(0.002, check)

    def stop(self, result: Any) -> None:
        if self._check is not None:
            self._check.cancel()


def as_dict(result: Any) -> dict[str, Any]:
    """A run's result document (`run_async` answers a `RunResult`, or a dict before it)."""
    doc: dict[str, Any] = result.to_dict() if hasattr(result, "to_dict") else result
    return doc


def run(sut: SystemUnderTest, overrides: list[str],
        during: Callable[[], object] | None = None) -> dict[str, Any]:
    """One run on uvloop, 60 s at most; `during()` is called once 20 measured queries
    completed."""
    monitors = [_After(during)] if during is not None else []
    coro = run_async(load_settings(None, overrides), sut, monitors=monitors)
    return as_dict(run_loop(asyncio.wait_for(coro, 60)))


@dataclass(frozen=True)
class Wire:
    """One OIP adapter as the shared scenarios drive it against the echo server."""

    name: str  # the result's `sut.protocol`
    spec: Callable[[Echo, str], str]  # the echo server's spec with options
    sut: Callable[[str], SystemUnderTest]
    busy: str  # options for the Server-scenario runs
    batches: str  # options for the Offline run in batches of 8
    unauthorized: str  # the error kind of a wrong token
    server_lost: frozenset[str]  # the error kinds once the server is killed mid-run ...
    refused: str  # ... of which this one must be among them (new calls refused)
    timeout_says: str  # how a query timeout's message starts
    gone: Callable[[Echo], str]  # what the error says when the server is gone at start


WIRES = (
    Wire("http", Echo.http, HttpSut.from_spec, "connections=8", "connections=1&batch=8", "http_401",
         frozenset({"connection_reset", "connect_error"}), "connect_error",
         "no answer in 100 ms", lambda echo: f"127.0.0.1:{echo.http_port}"),
    Wire("grpc", Echo.grpc, GrpcSut.from_spec, "", "max_in_flight=1&batch=8&connections=2",
         "grpc_UNAUTHENTICATED",
         frozenset({"grpc_UNAVAILABLE"}), "grpc_UNAVAILABLE", "DEADLINE_EXCEEDED",
         lambda echo: "UNAVAILABLE"),
)
