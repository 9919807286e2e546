"""HTTP/1.1 streamed responses on asyncio Protocols, each read stamped before it is parsed.

A `StreamConnection` carries one request at a time (`pool.ConnectionPool` feeds it) and
hands the response body on *as it arrives*, to the request's `StreamHandler`: `sent(now_ns,
connection)` as the request goes on the wire, `started(status, content_type, now_ns)` at
the response's head, `body(status, data, now_ns)` once per socket read with the body bytes that read completed,
`now_ns` being `perf_counter_ns()` taken first thing in `data_received`; then `finish(now_ns,
framed)` when the response ends, or `fail(now_ns, kind, detail)` when it cannot.

Framing (RFC 9112), head parsed by `fasthttp.parse_head`: chunked transfer coding decoded
incrementally (a chunk's bytes are handed on as soon as they arrive, not when the chunk is
whole, so an event is stamped at the read that completed it; extensions ignored, trailers
read and dropped), Content-Length, close-delimited (`framed` False: only the close shows the
end), interim 1xx skipped. A malformed response or bytes with no request in flight is a
`protocol_error` and drops the connection.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Protocol, cast

from loadgen.adapters.wire.fasthttp import (
    CHUNKED,
    MAX_CHUNK_LINE,
    MAX_HEAD,
    TO_CLOSE,
    header_value,
    parse_head,
)
from loadgen.adapters.wire.pool import ConnectionPool

__all__ = ["StreamConnection", "StreamHandler", "StreamPool"]

HEAD = -1
LENGTH = 0
TRAILERS = -4
CRLF_NEXT = -1
"""`StreamConnection.left` when a chunk's data is done and its CRLF is due."""
BULK = 512
"""Reads longer than this try `_whole_chunks` first."""
HEX_SIZES = {b"%x" % size: size for size in range(1, 4096)}
"""Chunk size lines of the common sizes (lowercase hex, no extension), read by one lookup."""


class StreamHandler(Protocol):
    """The request side of one streamed exchange (the pool's tag)."""

    def sent(self, now_ns: int, connection: StreamConnection) -> None:
        """The request went on the wire at `now_ns` (after any wait for a free connection),
        on `connection` (whose `abort` ends the exchange early)."""

    def started(self, status: int, content_type: bytes | None, now_ns: int) -> None:
        """The response's final head arrived: its status and Content-Type (None if absent)."""

    def body(self, status: int, data: bytes, now_ns: int) -> None:
        """Body bytes completed by the read stamped `now_ns`."""

    def finish(self, now_ns: int, framed: bool) -> None:
        """The response ended at `now_ns`; `framed` False when only the close showed it."""

    def fail(self, now_ns: int, kind: str, detail: str | None) -> None:
        """The exchange failed (connection lost, timeout, malformed response)."""


class StreamConnection(asyncio.Protocol):
    """One keep-alive connection; at most one streamed request in flight.

    `mode` is `HEAD` while waiting for a head, then `LENGTH` (with `left` bytes to come),
    `CHUNKED` (with `left` bytes of the current chunk to come, 0 at a size line,
    `CRLF_NEXT`), `TO_CLOSE`, or `TRAILERS`.
    """

    __slots__ = ("buf", "keep", "left", "mode", "pool", "sent_ns", "served", "status", "tag",
                 "transport")

    def __init__(self, pool: StreamPool) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.tag: StreamHandler | None = None
        self.sent_ns = self.served = self.status = self.left = 0
        self.mode = HEAD
        self.buf = b""
        self.keep = True

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.pool._up(self)

    def send(self, tag: StreamHandler, payload: bytes) -> None:
        self.tag, self.mode, self.buf = tag, HEAD, b""
        self.sent_ns = time.perf_counter_ns()
        tag.sent(self.sent_ns, self)
        self.transport.write(payload)  # type: ignore[union-attr]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter_ns()
        if self.tag is None:
            self.abort("protocol_error", now, "bytes with no request in flight")
            return
        mode = self.mode
        if mode == CHUNKED:
            self._chunked(data, now)
        elif mode == HEAD:
            self._head(data, now)
        elif mode == TO_CLOSE:
            self.tag.body(self.status, data, now)
        elif mode == LENGTH:
            self._length(data, now)
        else:
            self._trailers(data, now)

    def _head(self, data: bytes, now: int) -> None:
        buf = self.buf + data if self.buf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                self.abort("protocol_error", now, "response head too long")
            else:
                self.buf = buf
            return
        try:
            status, length, self.keep, _ = parse_head(buf[:end])
        except ValueError as exc:
            self.abort("protocol_error", now, str(exc))
            return
        self.buf, rest = b"", buf[end + 4:]
        if status < 200:
            if rest:
                self._head(rest, now)
            return
        self.status = status
        self.tag.started(status, header_value(buf[:end], b"content-type"), now)  # type: ignore[union-attr]
        if self.tag is None:  # the handler aborted on the head
            return
        if length == CHUNKED:
            self.mode, self.left = CHUNKED, 0
        elif length == TO_CLOSE:
            self.mode = TO_CLOSE
        else:
            self.mode, self.left = LENGTH, length
            if not length:
                self._finish(now, True)
                return
        if rest:
            self._rest(rest, now)

    def _rest(self, data: bytes, now: int) -> None:
        """Body bytes that came in the same read as the head."""
        if self.mode == CHUNKED:
            self._chunked(data, now)
        elif self.mode == TO_CLOSE:
            self.tag.body(self.status, data, now)  # type: ignore[union-attr]
        else:
            self._length(data, now)

    def _length(self, data: bytes, now: int) -> None:
        if len(data) > self.left:
            self.abort("protocol_error", now, "bytes past the end of the response")
            return
        self.left -= len(data)
        self.tag.body(self.status, data, now)  # type: ignore[union-attr]
        if not self.left:
            self._finish(now, True)

    def _chunked(self, data: bytes, now: int) -> None:
        """Decode chunk framing; hand on the data bytes this read completed (hot path: a
        whole chunk after its size line costs one find, one int and two slices; a read that
        is exactly one whole chunk, a decode step's, one bounded find, one lookup, one slice)."""
        if not self.left and not self.buf:
            eol = data.find(b"\r\n", 0, 8)
            size = HEX_SIZES.get(data[:eol]) if eol > 0 else None
            if size is not None and len(data) == eol + size + 4 and data.endswith(b"\r\n"):
                self.tag.body(self.status, data[eol + 2:eol + 2 + size], now)  # type: ignore[union-attr]
                return
        buf = self.buf + data if self.buf else data
        pos, n, left = 0, len(buf), self.left
        pieces: list[bytes] = []
        append, find = pieces.append, buf.find
        bulk = n > BULK
        while pos < n:
            if not left:
                if bulk:
                    bulk = False
                    pos = _whole_chunks(buf, pos, pieces)
                    continue
                eol = find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > MAX_CHUNK_LINE:
                        self.abort("protocol_error", now, "chunk size line too long")
                        return
                    break
                try:
                    size = int(buf[pos:eol], 16)
                except ValueError:
                    size = _chunk_size(buf[pos:eol])
                if size <= 0:
                    if size < 0:
                        self.abort("protocol_error", now,
                                   f"chunk size line not hex: {buf[pos:eol][:40]!r}")
                        return
                    self.mode = TRAILERS
                    if pieces:
                        self.tag.body(self.status, b"".join(pieces), now)  # type: ignore[union-attr]
                    self.buf = b""
                    self._trailers(buf[eol + 2:], now)
                    return
                pos = eol + 2
                stop = pos + size
                if stop + 2 <= n and buf[stop:stop + 2] == b"\r\n":
                    append(buf[pos:stop])
                    pos = stop + 2
                    continue
                left = size
            elif left > 0:
                stop = pos + left
                if stop > n:
                    append(buf[pos:])
                    left -= n - pos
                    pos = n
                    break
                append(buf[pos:stop])
                pos, left = stop, CRLF_NEXT
            else:
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    self.abort("protocol_error", now, "chunk data not followed by CRLF")
                    return
                pos, left = pos + 2, 0
        self.left = left
        self.buf = buf[pos:] if pos < n else b""
        if pieces:
            self.tag.body(self.status,  # type: ignore[union-attr]
                          pieces[0] if len(pieces) == 1 else b"".join(pieces), now)

    def _trailers(self, data: bytes, now: int) -> None:
        buf = self.buf + data if self.buf else data
        if buf[:2] == b"\r\n":
            end = 2
        else:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    self.abort("protocol_error", now, "trailers too long")
                else:
                    self.buf = buf
                return
            end += 4
        if end != len(buf):
            self.abort("protocol_error", now, "bytes past the end of the response")
            return
        self._finish(now, True)

    def _finish(self, now: int, framed: bool) -> None:
        tag, self.tag = self.tag, None
        if tag is None:  # its handler aborted the exchange earlier in this read
            return
        self.mode, self.buf = HEAD, b""
        self.served += 1
        pool = self.pool
        pool._failures = 0
        transport = self.transport
        if self.keep and transport is not None and not transport.is_closing():
            pool._next(self)
        elif transport is not None:
            transport.close()
        tag.finish(now, framed)

    def abort(self, kind: str, now_ns: int, detail: str | None = None) -> None:
        """Fail the request in flight (if any) with `kind` and drop the connection."""
        tag, self.tag = self.tag, None
        if tag is not None:
            tag.fail(now_ns, kind, detail)
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.mode == TO_CLOSE and self.tag is not None and exc is None:
            self.keep = False
            self._finish(time.perf_counter_ns(), False)
        self.pool._lost(self, exc)


def _whole_chunks(buf: bytes, pos: int, pieces: list[bytes]) -> int:
    """Take the whole chunks from `pos` at once when no chunk's data holds a CRLF (SSE
    with LF endings; JSON has no raw CR): one split, every size checked against its data's
    length by C-level maps. Answers the offset past them, `pos` when this does not apply
    (the byte-wise loop then reads them, and says what is wrong if anything is)."""
    parts = buf[pos:].split(b"\r\n")
    parts.pop()
    if len(parts) % 2:
        parts.pop()
    if not parts:
        return pos
    datas = parts[1::2]
    sizes: list[int | None] = list(map(HEX_SIZES.get, parts[0::2]))
    if None in sizes:
        try:
            sizes = list(map(int, parts[0::2], [16] * len(datas)))
        except ValueError:
            return pos
    if 0 in sizes or sizes != list(map(len, datas)):
        return pos
    pieces += datas
    return pos + sum(map(len, parts)) + 2 * len(parts)


def _chunk_size(line: bytes) -> int:
    """The size of a chunk size line with extensions (ignored), or -1 when it is not hex."""
    head = line.split(b";", 1)[0].strip(b" \t")
    if not head or len(head) > 15 or head.strip(b"0123456789abcdefABCDEF"):
        return -1
    return int(head, 16)


def _fail(tag: StreamHandler, now_ns: int, kind: str, detail: str | None) -> None:
    tag.fail(now_ns, kind, detail)


class StreamPool(ConnectionPool[StreamConnection]):
    """`connections` keep-alive streaming connections to one host; one stream each."""

    def __init__(self, host: str, port: int, connections: int,
                 ssl_context: ssl.SSLContext | None = None, timeout_ns: int = 0) -> None:
        super().__init__(host, port, connections, lambda: StreamConnection(self), _fail,
                         ssl_context, timeout_ns)
