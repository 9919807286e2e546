"""The fast client over loopback against a server that mixes every framing: the pool
reconnects after `Connection: close` and close-delimited answers, and `fetch` reads them all."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest

from loadgen.adapters.wire.fasthttp import HttpPool, fetch, request_bytes

pytestmark = pytest.mark.functional

ANSWERS = [
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n%03d",
    b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1;a=b\r\n%c\r\n2\r\n%c%c\r\n0\r\n\r\n",
    b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\n%03d",
    b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\n%03d",
    b"HTTP/1.0 200 OK\r\n\r\n%03d",
]
CLOSES = (3, 4)


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 turn: itertools.count[int]) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            body = await reader.readexactly(length)
            kind = next(turn) % len(ANSWERS)
            answer = ANSWERS[kind]
            writer.write(answer % tuple(body) if kind == 1 else answer % int(body))
            await writer.drain()
            if kind in CLOSES:
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    writer.close()


async def _exercise() -> tuple[dict[int, bytes], list[Any], list[int]]:
    turn = itertools.count()
    server = await asyncio.start_server(lambda r, w: _serve(r, w, turn), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    got: dict[int, bytes] = {}
    failures: list[Any] = []
    done = asyncio.get_running_loop().create_future()

    def response(tag: Any, status: int, buf: Any, start: int, *_: Any) -> None:
        got[tag] = bytes(buf[start:])
        if len(got) == 60 and not done.done():
            done.set_result(None)

    pool = HttpPool("127.0.0.1", port, 2, response, lambda *a: failures.append(a))
    await pool.start()
    for i in range(60):
        pool.submit(i, request_bytes("POST", "/", "h", {}, b"%03d" % i))
    await asyncio.wait_for(done, 20)
    await pool.close()
    statuses = []
    for i in range(len(ANSWERS)):
        status, body = await fetch("127.0.0.1", port, request_bytes("GET", "/", "h", {}, b"%03d"
                                                                     % (100 + i)))
        statuses.append(status)
        assert body == b"%03d" % (100 + i)
    server.close()
    await server.wait_closed()
    return got, failures, statuses


def test_every_framing_over_loopback_functional() -> None:
    got, failures, statuses = asyncio.run(asyncio.wait_for(_exercise(), 30))
    assert failures == []
    assert got == {i: b"%03d" % i for i in range(60)}
    assert statuses == [200] * len(ANSWERS)
