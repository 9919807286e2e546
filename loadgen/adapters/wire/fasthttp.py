"""A lean keep-alive HTTP/1.1 client on asyncio Protocols, for load, not for browsing.

Why not aiohttp: measured on a 2-CPU box against the minimal loopback server of
`benchmarks/http_client.py` with 64 keep-alive connections, aiohttp's client (64 tasks in a
post/read loop) reached ~8.5k requests/s, a bare asyncio-Protocol client ~155k, wrk ~150k,
and this client through the engine ~123k (Offline). aiohttp spends ~100 µs a request on
objects, header multidicts, stream readers and task switches; a load generator whose client
is 10x slower than the server measures itself. Here a request is a pre-serialised `bytes`
written as is, one in flight per connection (no pipelining), and the response parser reads
the status line, the framing headers, `Connection` and one extra header, nothing else;
a head seen before is not parsed again (`HttpPool.head`). The bare client costs ~5.8 µs of
CPU a request in the event loop and syscalls; every further µs here costs ~15% throughput,
so the Content-Length completion path is written out in `data_received` rather than split
into calls; every other framing leaves it after the head, for `_Connection._framed`.

Responses (RFC 9112): Content-Length; `Transfer-Encoding: chunked` (chunk extensions
ignored, trailers read and dropped; it wins over a Content-Length); close-delimited bodies
(read to EOF, then the connection is reopened); HTTP/1.0 (keep-alive only when the server
says `Connection: keep-alive`); `Connection: close` (the connection is closed after the
response and reopened); interim 1xx responses skipped; header names in any case; no
Content-Type needed. Requests always carry a Content-Type (`request_bytes`) and TLS works.
A malformed response, 101, or bytes arriving with no request in flight are protocol errors
(the connection is dropped); every failure passes a short `detail` (the reason, or the
exception text) to the failure callback.

`HttpPool` is a `pool.ConnectionPool` of these connections: each takes the next request from a
`Pending` FIFO when free. A lost connection fails its request (`connection_reset`) and is
reopened with backoff; while none is open, every failed attempt fails the queued requests
(`connect_error`), so a dead server fails queries promptly. `timeout_ns` fails a request
unanswered that long after it was written (`timeout`) and drops its connection.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
from collections.abc import Callable
from typing import cast

from loadgen.adapters.wire.pool import ConnectionPool, Failure
from loadgen.adapters.wire.queueing import Tag

__all__ = ["CHUNKED", "TO_CLOSE", "Chunked", "HttpPool", "fetch", "header_value", "not_http1",
           "parse_head",
           "request_bytes"]

MAX_HEAD = 64 << 10
MAX_CHUNK_LINE = 4096
CHUNKED = -2
"""`parse_head`'s body length of a chunked response."""
TO_CLOSE = -3
"""`parse_head`'s body length of a close-delimited response."""
HEAD_CACHE = 256

Response = Callable[[Tag, int, "bytes | bytearray", int, int, int, int], None]
"""(tag, status, buffer, body start, `extra_header` value or -1, sent_ns, done_ns)"""
_HEX = re.compile(rb"[0-9a-fA-F]{1,15}")


def request_bytes(method: str, path: str, host: str, headers: dict[str, str],
                  body: bytes = b"") -> bytes:
    """One serialised HTTP/1.1 request, Content-Length set, Content-Type JSON unless given."""
    if not any(k.lower() == "content-type" for k in headers):
        headers = {"Content-Type": "application/json", **headers}
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}", *(f"{k}: {v}" for k, v in
             headers.items()), f"Content-Length: {len(body)}", "", ""]
    return "\r\n".join(lines).encode("latin-1") + body


def _value(head: bytes | bytearray, name: bytes) -> bytes | None:
    """The value of header `name` (b"\\r\\nname:") in a lower-cased head, stripped, or None."""
    i = head.find(name)
    if i < 0:
        return None
    j = head.find(b"\r\n", i + 2)
    return bytes(head[i + len(name):j] if j >= 0 else head[i + len(name):]).strip()


def header_value(raw: bytes | bytearray, name: bytes) -> bytes | None:
    """The value of header `name` (lower case, no colon) in a response head, or None."""
    return _value(raw.lower(), b"\r\n" + name + b":")


def _number(head: bytes | bytearray, name: bytes) -> int:
    """The value of the integer header `name` (b"\\r\\nname:") in a lower-cased head, or -1."""
    value = _value(head, name)
    if value is None:
        return -1
    if not value.isdigit():
        raise ValueError(f"{name[2:-1].decode()} {value[:40]!r} is not a byte count")
    return int(value)


def parse_head(raw: bytes | bytearray, extra: bytes = b"") -> tuple[int, int, bool, int]:
    """(status, body length, keep-alive, `extra` value or -1) of a response head.

    `raw` ends before the blank line; `extra` is b"\\r\\nname:" in lower case. The length is
    `CHUNKED`, `TO_CLOSE` (read to EOF; keep-alive is then False), or a byte count; an
    interim 1xx head has length 0. Raises ValueError saying what is wrong.
    """
    head = raw.lower()
    if head[:7] != b"http/1." or len(head) < 12 or head[12:13] not in (b" ", b"\r", b"") \
            or not head[9:12].isdigit():
        raise ValueError(f"not an HTTP/1.x status line: {bytes(raw[:40])!r}")
    status = int(head[9:12])
    if status < 200:
        if status == 101:
            raise ValueError("101 Switching Protocols: not an HTTP/1.1 answer")
        return status, 0, True, -1
    coding = _value(head, b"\r\ntransfer-encoding:")
    if coding is not None:
        length = CHUNKED if coding.rsplit(b",", 1)[-1].strip() == b"chunked" else TO_CLOSE
    else:
        length = _number(head, b"\r\ncontent-length:")
        if length < 0:
            length = 0 if status in (204, 304) else TO_CLOSE
    tokens = (_value(head, b"\r\nconnection:") or b"").replace(b" ", b"").split(b",")
    keep = b"close" not in tokens if head[5:8] == b"1.1" else b"keep-alive" in tokens
    return status, length, keep and length != TO_CLOSE, _number(head, extra) if extra else -1


class Chunked:
    """The body of a chunked response, decoded as it arrives (sans I/O).

    `feed(buf)` reads on from where it stopped in `buf` (the same buffer, grown) and answers
    the offset just past the response, or -1 when more bytes are needed; ValueError says what
    is malformed. `body` is the decoded body once complete.
    """

    __slots__ = ("parts", "pos", "trailers")

    def __init__(self, start: int) -> None:
        self.pos = start
        self.parts: list[bytes] = []
        self.trailers = False

    @property
    def body(self) -> bytes:
        """The chunks' data joined."""
        return b"".join(self.parts)

    def feed(self, buf: bytes | bytearray) -> int:
        """Offset past the end of the response in `buf`, or -1 (need more)."""
        pos = self.pos
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                if len(buf) - pos > (MAX_HEAD if self.trailers else MAX_CHUNK_LINE):
                    raise ValueError("trailers too long" if self.trailers
                                     else "chunk size line too long")
                self.pos = pos
                return -1
            if self.trailers:
                if eol == pos:
                    return eol + 2
                pos = eol + 2
                continue
            size = buf[pos:eol].split(b";", 1)[0].strip(b" \t")
            if _HEX.fullmatch(size) is None:
                raise ValueError(f"chunk size line not hex: {bytes(buf[pos:eol][:40])!r}")
            n = int(size, 16)
            if n == 0:
                self.trailers = True
                pos = eol + 2
                continue
            end = eol + 2 + n
            if len(buf) < end + 2:
                self.pos = pos
                return -1
            if buf[end:end + 2] != b"\r\n":
                raise ValueError("chunk data not followed by CRLF")
            self.parts.append(bytes(buf[eol + 2:end]))
            pos = end + 2


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request in flight.

    `total` is -1 while waiting for a head, the offset past the body of a Content-Length
    response, or `CHUNKED` / `TO_CLOSE` while such a body arrives (`_framed`).
    """

    __slots__ = ("buf", "chunks", "extra", "keep", "pool", "sent_ns", "served", "start", "status",
                 "tag", "total", "transport")

    def __init__(self, pool: HttpPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.tag: Tag = None
        self.sent_ns = self.served = self.start = self.status = 0
        self.buf = bytearray()
        self.total = self.extra = -1
        self.keep = True
        self.chunks: Chunked | None = None

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
            if self.total != -1:
                self._framed(buf, now)
                return
            end = buf.find(b"\r\n\r\n")
            if end < 0 or self.tag is None:
                if self.tag is None or len(buf) > MAX_HEAD:
                    self.abort("protocol_error", now, "response head too long" if self.tag
                               else "bytes with no request in flight")
                elif not self.buf:
                    self.buf += buf
                return
            head = bytes(buf[:end]) if self.buf else buf[:end]
            try:
                status, length, self.keep, self.extra = (
                    self.pool._heads.get(head) or self.pool.head(head))  # type: ignore[arg-type]
            except ValueError as exc:
                self.abort("protocol_error", now, str(exc))
                return
            self.status, self.start = status, end + 4
            if length < 0 or status < 200:
                self._other(buf, length, now)
                return
            self.total = end + 4 + length
        if len(buf) != self.total:
            if len(buf) > self.total:
                self.abort("protocol_error", now, "bytes past the end of the response")
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

    # -- the slow paths: interim, chunked and close-delimited responses ----------------------

    def _other(self, buf: bytes | bytearray, length: int, now: int) -> None:
        """After a head that is not a final Content-Length one."""
        rest = bytes(buf[self.start:])
        self.buf = bytearray()
        if self.status < 200:  # interim: drop it, read on
            if rest:
                self.data_received(rest)
            return
        self.total = length
        self.chunks = Chunked(0) if length == CHUNKED else None
        self.start = 0
        self.buf += rest
        if rest:
            self._framed(self.buf, now)

    def _framed(self, buf: bytes | bytearray, now: int) -> None:
        """Body bytes of a chunked or close-delimited response (in `self.buf` from `start`)."""
        if not self.buf:
            self.buf += buf
            buf = self.buf
        chunks = self.chunks
        if chunks is None:  # TO_CLOSE: the body ends with the connection
            return
        try:
            end = chunks.feed(buf)
        except ValueError as exc:
            self.abort("protocol_error", now, str(exc))
            return
        if end < 0:
            return
        if end != len(buf):
            self.abort("protocol_error", now, "bytes past the end of the response")
            return
        self._complete(chunks.body, now)

    def _complete(self, body: bytes, now: int) -> None:
        """A response ends (not the hot path): send the next request, then report this one."""
        tag, self.tag, self.total, self.chunks = self.tag, None, -1, None
        status, extra, sent_ns = self.status, self.extra, self.sent_ns
        self.buf = bytearray()
        self.served += 1
        pool = self.pool
        pool._failures = 0
        if self.keep and self.transport is not None and not self.transport.is_closing():
            pool._next(self)
        elif self.transport is not None:
            self.transport.close()
        pool.on_response(tag, status, body, 0, extra, sent_ns, now)

    def abort(self, kind: str, now_ns: int, detail: str | None = None) -> None:
        """Fail the request in flight (if any) with `kind` and drop the connection."""
        tag, self.tag = self.tag, None
        if tag is not None:
            self.pool.on_failure(tag, now_ns, kind, detail)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.total == TO_CLOSE and self.tag is not None and exc is None:
            self.keep = False
            self._complete(bytes(self.buf), time.perf_counter_ns())
        self.pool._lost(self, exc)


class HttpPool(ConnectionPool[_Connection]):
    """`connections` keep-alive request/response connections to one host (`pool`), fed from
    a local FIFO; `on_response` gets each answer."""

    def __init__(self, host: str, port: int, connections: int, on_response: Response,
                 on_failure: Failure, ssl_context: ssl.SSLContext | None = None,
                 timeout_ns: int = 0, extra_header: str = "") -> None:
        super().__init__(host, port, connections, lambda: _Connection(self), on_failure,
                         ssl_context, timeout_ns)
        self.on_response = on_response
        self.extra_header = f"\r\n{extra_header.lower()}:".encode() if extra_header else b""
        self._heads: dict[bytes, tuple[int, int, bool, int]] = {}

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


def not_http1(partial: bytes) -> str:
    """Why a connection closed before an HTTP/1.1 response head: an HTTP/2 server's frames
    (a SETTINGS frame first: type 4 at byte 3) mean a gRPC port; else say what came."""
    if len(partial) >= 9 and not partial.startswith(b"HTTP/") and partial[3] == 4:
        return ("the server answered with HTTP/2 frames, not HTTP/1.1: this looks like a "
                "gRPC port (use grpc://HOST:PORT/MODEL), or the wrong port")
    return (f"the connection closed after {len(partial)} bytes, before an HTTP response "
            f"head{f' ({partial[:40]!r})' if partial else ''}")


async def fetch(host: str, port: int, request: bytes, ssl_context: ssl.SSLContext | None = None,
                timeout_s: float = 10.0) -> tuple[int, bytes]:
    """One request on a fresh connection: (status, body), any framing; for setup calls."""
    async def exchange() -> tuple[int, bytes]:
        reader, writer = await asyncio.open_connection(
            host, port, ssl=ssl_context, server_hostname=host if ssl_context else None)
        try:
            writer.write(request)
            status = 100
            while status < 200:
                try:
                    raw = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError as exc:
                    raise ValueError(not_http1(exc.partial)) from None
                status, length, _, _ = parse_head(raw[:-4])
            if length >= 0:
                return status, await reader.readexactly(length)
            if length == TO_CLOSE:
                return status, await reader.read()
            buf, chunks = bytearray(), Chunked(0)
            while chunks.feed(buf) < 0:
                data = await reader.read(65536)
                if not data:
                    raise ValueError("connection closed inside a chunked body")
                buf += data
            return status, chunks.body
        finally:
            writer.close()

    return await asyncio.wait_for(exchange(), timeout_s)
