"""A lean keep-alive HTTP/1.1 client on asyncio Protocols, for load, not for browsing.

Why not aiohttp: measured on a 2-CPU box against the minimal loopback server of
`benchmarks/http_client.py` with 64 keep-alive connections, aiohttp's client (64 tasks in a
post/read loop) reached ~8.5k requests/s, a bare asyncio-Protocol client ~155k, wrk ~150k,
and this client through the engine ~123k (Offline). aiohttp spends ~100 µs a request on
objects, header multidicts, stream readers and task switches; a load generator whose client
is 10x slower than the server measures itself. Here a request is a pre-serialised `bytes`
written as is, one in flight per connection (no pipelining), and the response parser reads
the status line, Content-Length, `Connection: close` and one extra header, nothing else;
a head seen before is not parsed again (`HttpPool.head`). The bare client costs ~5.8 µs of
CPU a request in the event loop and syscalls; every further µs here costs ~15% throughput,
so the completion path is written out in `data_received` rather than split into calls.

Supported: Content-Length framing, keep-alive, TLS. Chunked or close-delimited bodies, and
bytes arriving with no request in flight, are protocol errors (the connection is dropped).

`HttpPool` keeps `connections` connections open, each taking the next request from a
`Pending` FIFO when free. A lost connection fails its request (`connection_reset`) and is
reopened with backoff; while none is open, every failed attempt fails the queued requests
(`connect_error`), so a dead server fails queries promptly. `timeout_ns` fails a request
unanswered that long after it was written (`timeout`) and drops its connection.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable
from typing import cast

from loadgen.adapters.remote import Job, Pending, Tag

__all__ = ["HttpPool", "fetch", "parse_head", "request_bytes"]

MAX_HEAD = 64 << 10
BACKOFF_MIN_S = 0.01
BACKOFF_MAX_S = 0.5
HEAD_CACHE = 256

Response = Callable[[Tag, int, "bytes | bytearray", int, int, int, int], None]
"""(tag, status, buffer, body start, `extra_header` value or -1, sent_ns, done_ns)"""
Failure = Callable[[Tag, int, str], None]
"""(tag, now_ns, kind)"""


def request_bytes(method: str, path: str, host: str, headers: dict[str, str],
                  body: bytes = b"") -> bytes:
    """One serialised HTTP/1.1 request, Content-Length set."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in
             headers.items()), f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


def _number(head: bytes | bytearray, name: bytes) -> int:
    """The value of the integer header `name` (b"\\r\\nname:") in a lower-cased head, or -1."""
    i = head.find(name)
    if i < 0:
        return -1
    j = head.find(b"\r\n", i + 2)
    value = int(head[i + len(name):j] if j >= 0 else head[i + len(name):])
    if value < 0:
        raise ValueError(f"negative {name[2:-1].decode()}")
    return value


def parse_head(raw: bytes | bytearray, extra: bytes = b"") -> tuple[int, int, bool, int]:
    """(status, body length, keep-alive, `extra` value or -1) of a response head.

    `raw` ends before the blank line; `extra` is b"\\r\\nname:" in lower case.
    """
    head = raw.lower()
    if head[:7] != b"http/1." or len(head) < 12 or head[12:13] not in (b" ", b"\r", b""):
        raise ValueError("not an HTTP/1.x status line")
    status = int(head[9:12])
    length = _number(head, b"\r\ncontent-length:")
    if length < 0:
        if status not in (204, 304):
            raise ValueError("no Content-Length (chunked and close-delimited bodies unsupported)")
        length = 0
    keep = head[5:8] == b"1.1" and b"\r\nconnection: close" not in head
    return status, length, keep, _number(head, extra) if extra else -1


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request in flight."""

    __slots__ = ("buf", "extra", "keep", "pool", "sent_ns", "served", "start", "status", "tag",
                 "total", "transport")

    def __init__(self, pool: HttpPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.tag: Tag = None
        self.sent_ns = self.served = self.start = self.status = 0
        self.buf = bytearray()
        self.total = self.extra = -1
        self.keep = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        self.pool._up(self)

    def send(self, tag: Tag, payload: bytes) -> None:
        self.tag = tag
        self.sent_ns = time.perf_counter_ns()
        self.transport.write(payload)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        buf: bytes | bytearray = data
        if self.buf:
            self.buf += data
            buf = self.buf
        if self.total < 0:
            end = buf.find(b"\r\n\r\n")
            if end < 0 or self.tag is None:
                if self.tag is None or len(buf) > MAX_HEAD:
                    self.abort("protocol_error", now)
                elif not self.buf:
                    self.buf += buf
                return
            head = bytes(buf[:end]) if self.buf else buf[:end]
            try:
                self.status, length, self.keep, self.extra = (
                    self.pool._heads.get(head) or self.pool.head(head))  # type: ignore[arg-type]
            except ValueError:
                self.abort("protocol_error", now)
                return
            self.start = end + 4
            self.total = self.start + length
        if len(buf) != self.total:
            if len(buf) > self.total:
                self.abort("protocol_error", now)
            elif not self.buf:
                self.buf += buf
            return
        tag, self.tag, self.total = self.tag, None, -1
        if self.buf:
            self.buf = bytearray()
        self.served += 1
        # Completion, inline (hot path): send the next request, then report this one.
        pool = self.pool
        pool._failures = 0
        status, start, extra, sent_ns = self.status, self.start, self.extra, self.sent_ns
        if self.keep:
            item = pool.pending.pop()
            if item is None:
                pool._idle.append(self)
            else:
                self.tag = item[0]
                self.sent_ns = time.perf_counter_ns()
                self.transport.write(item[1])  # type: ignore[union-attr]
        else:
            self.transport.close()  # type: ignore[union-attr]
        pool.on_response(tag, status, buf, start, extra, sent_ns, now)

    def abort(self, kind: str, now_ns: int) -> None:
        """Fail the request in flight (if any) with `kind` and drop the connection."""
        tag, self.tag = self.tag, None
        if tag is not None:
            self.pool.on_failure(tag, now_ns, kind)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.pool._lost(self)


class HttpPool:
    """`connections` keep-alive connections to one host, fed from a local FIFO."""

    def __init__(self, host: str, port: int, connections: int, on_response: Response,
                 on_failure: Failure, ssl_context: ssl.SSLContext | None = None,
                 timeout_ns: int = 0, extra_header: str = "") -> None:
        self.host, self.port, self.connections = host, port, connections
        self.on_response, self.on_failure = on_response, on_failure
        self.ssl = ssl_context
        self.timeout_ns = timeout_ns
        self.extra_header = f"\r\n{extra_header.lower()}:".encode() if extra_header else b""
        self.pending: Pending[bytes] = Pending()
        self._idle: list[_Connection] = []
        self._live: list[_Connection] = []
        self._failures = 0
        self._closing = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._sweeper: asyncio.TimerHandle | None = None
        self._heads: dict[bytes, tuple[int, int, bool, int]] = {}

    @property
    def live(self) -> int:
        """Connections open now."""
        return len(self._live)

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
        await loop.create_connection(lambda: _Connection(self), self.host, self.port,
                                     ssl=self.ssl, server_hostname=self.host if self.ssl else None)

    def _up(self, conn: _Connection) -> None:
        if self._closing:
            assert conn.transport is not None
            conn.transport.close()
            return
        self._live.append(conn)
        self._next(conn)

    def _next(self, conn: _Connection) -> None:
        item = self.pending.pop()
        if item is None:
            self._idle.append(conn)
        else:
            conn.send(*item)

    def head(self, raw: bytes) -> tuple[int, int, bool, int]:
        """`parse_head` of a response head, remembered: a server repeats a few heads verbatim.

        A cache hit (hash and lookup of the head bytes) costs a tenth of a parse; the cache
        is emptied when it holds `HEAD_CACHE` heads (a `Date` header makes a new one a second).
        """
        parsed = self._heads.get(raw)
        if parsed is None:
            parsed = parse_head(raw, self.extra_header)
            if len(self._heads) >= HEAD_CACHE:
                self._heads.clear()
            self._heads[raw] = parsed
        return parsed

    def _lost(self, conn: _Connection) -> None:
        if conn in self._live:
            self._live.remove(conn)
        if conn in self._idle:
            self._idle.remove(conn)
        if conn.tag is not None:
            tag, conn.tag = conn.tag, None
            self.on_failure(tag, time.perf_counter_ns(), "connection_reset")
        if self._closing:
            return
        if not conn.served:
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
            except OSError:
                self._failures += 1
                if not self._live:
                    self.pending.fail_all(self.on_failure, time.perf_counter_ns(),
                                          "connect_error")
                delay = self._backoff()

    def _sweep(self) -> None:
        now = time.perf_counter_ns()
        for conn in list(self._live):
            if conn.tag is not None and now - conn.sent_ns >= self.timeout_ns:
                conn.abort("timeout", now)
        period = min(max(self.timeout_ns / 10e9, 0.001), 0.1)
        self._sweeper = asyncio.get_running_loop().call_later(period, self._sweep)


async def fetch(host: str, port: int, request: bytes, ssl_context: ssl.SSLContext | None = None,
                timeout_s: float = 10.0) -> tuple[int, bytes]:
    """One request on a fresh connection: (status, body); for setup calls."""
    async def exchange() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=ssl_context, server_hostname=host if ssl_context else None)
        try:
            writer.write(request)
            raw = await reader.readuntil(b"\r\n\r\n")
            status, length, _, _ = parse_head(raw[:-4])
            return status, await reader.readexactly(length)
        finally:
            writer.close()

    return await asyncio.wait_for(exchange(), timeout_s)
