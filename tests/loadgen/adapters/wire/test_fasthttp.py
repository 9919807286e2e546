"""The fast client's response reader, fed canned byte chunks (no sockets): every framing,
split at every position."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.adapters.http import error_detail
from loadgen.adapters.wire import fasthttp
from loadgen.adapters.wire.fasthttp import (
    CHUNKED,
    TO_CLOSE,
    Chunked,
    HttpPool,
    parse_head,
    request_bytes,
)

EXTRA = "inference-header-content-length"
CL = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello"
KSERVE = (b"HTTP/1.1 200 OK\r\ndate: x\r\nserver: uvicorn\r\ninference-header-content-length: 2\r\n"
          b"transfer-encoding: chunked\r\n\r\n3;name=value\r\n{}a\r\n2\r\nbc\r\n0\r\n"
          b"x-trailer: 1\r\n\r\n")
INTERIM = (b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: x\r\n\r\n"
           b"HTTP/1.1 200 OK\r\nCONTENT-LENGTH: 2\r\n\r\nok")
CLOSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
EOF_10 = b"HTTP/1.0 200 OK\r\nServer: old\r\n\r\nto the end"


class Transport:
    """What the connection writes and whether it was closed."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.closed or self.aborted


class Harness:
    """A pool (never started) and one connection with a request in flight."""

    def __init__(self) -> None:
        self.responses: list[tuple[Any, int, bytes, int]] = []
        self.failures: list[tuple[Any, str, str | None]] = []
        self.pool = HttpPool("127.0.0.1", 1, 1, self._response, self._failure,
                             extra_header=EXTRA)
        self.pool._closing = True  # a lost connection is not reopened (no loop here)
        self.conn = fasthttp._Connection(self.pool)
        self.transport = Transport()
        self.conn.transport = self.transport  # type: ignore[assignment]
        self.conn.send(1, b"request 1")

    def _response(self, tag: Any, status: int, buf: bytes | bytearray, start: int, extra: int,
                  sent_ns: int, done_ns: int) -> None:
        self.responses.append((tag, status, bytes(buf[start:]), extra))

    def _failure(self, tag: Any, now_ns: int, kind: str, detail: str | None) -> None:
        self.failures.append((tag, kind, detail))

    def feed(self, *chunks: bytes) -> Harness:
        for chunk in chunks:
            if chunk:
                self.conn.data_received(chunk)
        return self


def splits(raw: bytes) -> list[tuple[bytes, ...]]:
    """`raw` whole, in two at every position, and byte by byte."""
    return [(raw[:i], raw[i:]) for i in range(len(raw) + 1)] + [
        tuple(raw[i:i + 1] for i in range(len(raw)))]


@pytest.mark.parametrize("raw, body, extra, keep", [
    (CL, b"hello", -1, True), (KSERVE, b"{}abc", 2, True), (INTERIM, b"ok", -1, True),
    (CLOSE, b"ok", -1, False)])
def test_each_framing_split_anywhere(raw: bytes, body: bytes, extra: int, keep: bool) -> None:
    for chunks in splits(raw):
        h = Harness()
        h.pool.pending.put(2, b"request 2")
        h.feed(*chunks)
        assert h.failures == [], chunks
        assert h.responses == [(1, 200, body, extra)], chunks
        if keep:  # the next request goes out on the same connection
            assert h.transport.written[-1] == b"request 2" and h.conn.tag == 2
            assert not h.transport.closed
        else:
            assert h.transport.closed and h.conn.tag is None and len(h.pool.pending) == 1


def test_close_delimited_body_ends_with_the_connection() -> None:
    for chunks in splits(EOF_10):
        h = Harness().feed(*chunks)
        assert h.responses == []
        h.conn.connection_lost(None)
        assert h.responses == [(1, 200, b"to the end", -1)] and h.failures == []


def test_a_reset_inside_a_close_delimited_body_fails_the_request() -> None:
    h = Harness().feed(EOF_10[:-3])
    h.conn.connection_lost(ConnectionResetError("reset by peer"))
    assert h.responses == []
    assert h.failures == [(1, "connection_reset", "connection lost: reset by peer")]


def test_two_responses_in_turn_on_one_connection() -> None:
    h = Harness()
    h.pool.pending.put(2, b"request 2")
    h.feed(KSERVE[:50], KSERVE[50:])
    h.feed(CL)
    assert [r[0] for r in h.responses] == [1, 2] and h.conn.tag is None
    assert h.pool._idle == [h.conn]


@pytest.mark.parametrize("raw, reason", [
    (KSERVE.replace(b"3;name", b"z;name"), "chunk size line not hex"),
    (KSERVE.replace(b"{}a\r\n", b"{}ab\r\n"), "chunk data not followed by CRLF"),
    (CL + b"!", "bytes past the end of the response"),
    (KSERVE + b"HTTP", "bytes past the end of the response"),
    (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "101 Switching Protocols"),
    (b"SPDY/3 200 OK\r\n\r\n", "not an HTTP/1.x status line"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: -3\r\n\r\n", "is not a byte count"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n" + b"x" * 6, "bytes past the end"),
])
def test_protocol_errors_say_why(raw: bytes, reason: str) -> None:
    h = Harness().feed(raw)
    assert h.responses == [] and h.transport.aborted
    [(tag, kind, detail)] = h.failures
    assert (tag, kind) == (1, "protocol_error") and detail is not None and reason in detail


def test_bytes_with_no_request_in_flight() -> None:
    h = Harness().feed(CL)
    h.feed(b"HTTP/1.1 200 OK\r\n")
    assert h.transport.aborted and h.failures == []


def test_parse_head_framing_and_keep_alive() -> None:
    assert parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 3") == (200, 3, True, -1)
    assert parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n"
                      b"Content-Length: 3") == (200, CHUNKED, True, -1)
    assert parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip") == (200, TO_CLOSE, False, -1)
    assert parse_head(b"HTTP/1.1 200 OK") == (200, TO_CLOSE, False, -1)
    assert parse_head(b"HTTP/1.1 204 No Content") == (204, 0, True, -1)
    assert parse_head(b"HTTP/1.1 200 OK\r\nconnection: Keep-Alive, Close\r\n"
                      b"content-length: 0") == (200, 0, False, -1)
    assert parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: 1") == (200, 1, False, -1)
    assert parse_head(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1") == (
        200, 1, True, -1)
    assert parse_head(b"HTTP/1.1 100 Continue")[:2] == (100, 0)
    assert parse_head(b"HTTP/1.1 200\r\nINFERENCE-Header-Content-Length: 7\r\n"
                      b"Content-Length: 9", b"\r\ninference-header-content-length:")[3] == 7


def test_chunked_reads_on_from_where_it_stopped() -> None:
    body = b"4\r\nwiki\r\n5;x=y\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\n\r\n"
    buf, chunks = bytearray(), Chunked(0)
    ends = []
    for byte in body:
        buf.append(byte)
        ends.append(chunks.feed(buf))
    assert ends[:-1] == [-1] * (len(body) - 1) and ends[-1] == len(body)
    assert chunks.body == b"wikipedia in\r\n\r\nchunks."
    with pytest.raises(ValueError, match="chunk size line too long"):
        Chunked(0).feed(b"1" * 5000)


def test_requests_always_carry_a_content_type() -> None:
    assert b"\r\nContent-Type: application/json\r\n" in request_bytes("GET", "/", "h", {})
    raw = request_bytes("POST", "/", "h", {"content-type": "application/octet-stream"}, b"x")
    assert raw.count(b"ontent-") == 2 and raw.endswith(b"\r\n\r\nx")


def test_error_detail_reads_common_error_bodies() -> None:
    assert error_detail(503, b'{"error": "overloaded"}') == (
        "HTTP 503 Service Unavailable: overloaded")
    detail = error_detail(422, b'{"detail": [{"msg": "bad"}]}')  # the phrase varies by Python
    assert detail.startswith("HTTP 422 Unprocessable") and detail.endswith(': [{"msg": "bad"}]')
    assert error_detail(500, b"x" * 1000) == "HTTP 500 Internal Server Error: " + "x" * 200
    assert error_detail(599, b"") == "HTTP 599"
