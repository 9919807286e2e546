"""Keep-alive connections to one host, fed from a local FIFO: what every pooled client shares.

`ConnectionPool` keeps `connections` connections open, each taking the next request from a
`Pending` FIFO when free. The connections are asyncio Protocols made by the factory it is
given (`fasthttp`'s request/response one, `streamhttp`'s token-stream one); each meets
`PooledConnection`. A connection the server closes cleanly while idle, at least
`SETTLED_S` after it opened (a keep-alive idle timeout), is no failure: it is reopened at
once, not lazily, so that the next request does not pay for the connect. Any other lost
connection fails its request (`connection_reset`) and is reopened; one that closes sooner
or before it served (a server that accepts then closes) counts a failure, and the reopen
waits an exponential backoff (`BACKOFF_MIN_S` to `BACKOFF_MAX_S`). A good connection (one
that served, or settled then closed idle) resets the count, so one bad patch does not slow
the rest of the run. While none is open, every failed attempt fails the queued requests
(`connect_error`), so a dead server fails queries promptly. `timeout_ns` fails a request
not finished that long after it was written (`timeout`) and drops its connection.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar, cast

from loadgen.adapters.wire.queueing import Job, Pending, Tag

__all__ = ["BACKOFF_MAX_S", "BACKOFF_MIN_S", "SETTLED_S", "ConnectionPool", "Failure",
           "PooledConnection"]

BACKOFF_MIN_S = 0.01
BACKOFF_MAX_S = 0.5
SETTLED_S = 0.05
"""A connection open this long before the server closes it idle was a good one."""

Failure = Callable[[Tag, int, str, "str | None"], None]
"""(tag, now_ns, kind, detail)"""


class PooledConnection(Protocol):
    """What the pool needs of a connection: one request at a time, tagged."""

    transport: asyncio.Transport | None
    tag: Tag
    sent_ns: int
    served: int

    def send(self, tag: Tag, payload: bytes) -> None:
        """Write one request; `tag` stays set until it is answered or fails."""

    def abort(self, kind: str, now_ns: int, detail: str | None = None) -> None:
        """Fail the request in flight (if any) with `kind` and drop the connection."""


C = TypeVar("C", bound=PooledConnection)


class ConnectionPool(Generic[C]):
    """`connections` keep-alive connections to one host, fed from a local FIFO."""

    def __init__(self, host: str, port: int, connections: int, protocol: Callable[[], C],
                 on_failure: Failure, ssl_context: ssl.SSLContext | None = None,
                 timeout_ns: int = 0) -> None:
        self.host, self.port, self.connections = host, port, connections
        self.protocol = protocol
        self.on_failure = on_failure
        self.ssl = ssl_context
        self.timeout_ns = timeout_ns
        self.pending: Pending[bytes] = Pending()
        self._idle: list[C] = []
        self._live: dict[C, int] = {}  # each open connection: when it opened (perf_counter_ns)
        self._failures = 0
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.TimerHandle | None = None

    @property
    def live(self) -> int:
        """Connections open now."""
        return len(self._live)

    def in_flight(self) -> list[Tag]:
        """The tags of the requests on the wire now (sent, not yet answered in full)."""
        return [conn.tag for conn in self._live if conn.tag is not None]

    async def start(self) -> None:
        """Open every connection; raises the first error if none opens."""
        results = await asyncio.gather(*(self._open() for _ in range(self.connections)),
                                       return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if not self._live:
            raise errors[0] if errors else ConnectionError("no connection opened")
        for _ in errors:
            self._reconnect(BACKOFF_MIN_S)
        if self.timeout_ns:
            self._sweep()

    def submit(self, tag: Tag, payload: bytes) -> None:
        """Send now on an idle connection, or queue."""
        if self._idle:
            self._idle.pop().send(tag, payload)
        else:
            self.pending.put(tag, payload)

    def submit_job(self, job: Job[bytes]) -> None:
        """Queue a query of several requests and start as many as connections are idle."""
        self.pending.put_job(job)
        while self._idle and self.pending:
            self._next(self._idle.pop())

    async def close(self) -> None:
        """Close every connection; requests in flight are abandoned."""
        self._closing = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        for task in list(self._tasks):
            task.cancel()
        for conn in list(self._live):
            assert conn.transport is not None
            conn.tag = None
            conn.transport.close()
        await asyncio.sleep(0)

    # -- connection events ----------------------------------------------------------------

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        factory = cast("Callable[[], asyncio.Protocol]", self.protocol)  # C is one
        await loop.create_connection(factory, self.host, self.port, ssl=self.ssl,
                                     server_hostname=self.host if self.ssl else None)

    def _up(self, conn: C) -> None:
        if self._closing:
            assert conn.transport is not None
            conn.transport.close()
            return
        self._live[conn] = time.perf_counter_ns()
        self._next(conn)

    def _next(self, conn: C) -> None:
        item = self.pending.pop()
        if item is None:
            self._idle.append(conn)
        else:
            conn.send(*item)

    def _lost(self, conn: C, exc: Exception | None = None) -> None:
        now = time.perf_counter_ns()
        opened_ns = self._live.pop(conn, now)
        was_idle = conn in self._idle
        if was_idle:
            self._idle.remove(conn)
        if conn.tag is not None:
            tag, conn.tag = conn.tag, None
            self.on_failure(tag, now, "connection_reset",
                            f"connection lost: {exc}" if exc else "connection closed by the server")
        if self._closing:
            return
        if was_idle and exc is None and now - opened_ns >= SETTLED_S * 1e9:
            self._failures = 0  # the server's idle timeout: a good connection, reopen now
        elif not conn.served:
            self._failures += 1
        self._reconnect(self._backoff())

    def _backoff(self) -> float:
        if not self._failures:
            return 0.0
        return float(min(BACKOFF_MIN_S * 2 ** min(self._failures - 1, 16), BACKOFF_MAX_S))

    def _reconnect(self, delay: float) -> None:
        task = asyncio.get_running_loop().create_task(self._reopen(delay))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reopen(self, delay: float) -> None:
        while not self._closing:
            await asyncio.sleep(delay)
            try:
                await self._open()
                return
            except OSError as exc:
                self._failures += 1
                if not self._live:
                    self.pending.fail_all(self.on_failure, time.perf_counter_ns(),
                                          "connect_error", str(exc) or type(exc).__name__)
                delay = self._backoff()

    def _sweep(self) -> None:
        now = time.perf_counter_ns()
        for conn in list(self._live):
            if conn.tag is not None and now - conn.sent_ns >= self.timeout_ns:
                conn.abort("timeout", now, f"no answer in {self.timeout_ns / 1e6:g} ms")
        period = min(max(self.timeout_ns / 10e9, 0.001), 0.1)
        self._sweeper = asyncio.get_running_loop().call_later(period, self._sweep)
