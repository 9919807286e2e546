"""The connection pool against small loopback servers of ours: a server's idle close is no
failure, a server that accepts then closes is one (backoff), and a good connection after
such a patch resets the backoff."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from loadgen.adapters.wire.fasthttp import HttpPool, request_bytes
from loadgen.adapters.wire.pool import BACKOFF_MIN_S, SETTLED_S

IDLE_S = 0.2  # the test server's idle timeout: well past SETTLED_S
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
DEADLINE_S = 10.0


class Server:
    """An HTTP/1.1 server on 127.0.0.1 that answers `ok`. It closes a connection idle for
    `IDLE_S` until it has closed `idle_closes` so (then idle ones stay open), and while
    `refusing` closes each connection as soon as it accepts it."""

    def __init__(self, idle_closes: int = 0, refusing: bool = False) -> None:
        self.idle_closes = idle_closes
        self.refusing = refusing
        self.accepted = self.closed_idle = self.refused = 0
        self.changed = asyncio.Event()
        self.port = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def until(self, done: Callable[[], bool]) -> None:
        """Wait, at most `DEADLINE_S`, until `done()` holds (checked at each server event)."""
        async def wait() -> None:
            while not done():
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(wait(), DEADLINE_S)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self.changed.set()
        self._writers.add(writer)
        try:
            if self.refusing:
                self.refused += 1
                return
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), IDLE_S)
                except TimeoutError:
                    if self.closed_idle >= self.idle_closes:
                        continue
                    self.closed_idle += 1
                    return
                length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                await reader.readexactly(length)
                writer.write(ANSWER)
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self._writers.discard(writer)
            writer.close()
            self.changed.set()


class Client:
    """A pool of `connections` to the server, recording answers and failures by tag."""

    def __init__(self, server: Server, connections: int) -> None:
        self.answered: dict[int, float] = {}
        self.failed: dict[int, str] = {}
        self.sent: dict[int, float] = {}
        self.server = server
        self.pool = HttpPool("127.0.0.1", server.port, connections, self._answer, self._fail)

    def send(self, tags: range) -> None:
        for tag in tags:
            self.sent[tag] = time.perf_counter()
            self.pool.submit(tag, request_bytes("POST", "/", "h", {}, b"x"))

    def _answer(self, tag: Any, status: int, buf: bytes | bytearray, start: int, extra: int,
                sent_ns: int, done_ns: int) -> None:
        assert status == 200 and bytes(buf[start:]) == b"ok"
        self.answered[tag] = time.perf_counter() - self.sent[tag]
        self.server.changed.set()

    def _fail(self, tag: Any, now_ns: int, kind: str, detail: str | None) -> None:
        self.failed[tag] = kind
        self.server.changed.set()


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 3 * DEADLINE_S))


def test_idle_closes_by_the_server_are_no_failure_and_reopen_at_once() -> None:
    connections = 4

    async def scenario() -> None:
        async with Server(idle_closes=2 * connections) as server:
            client = Client(server, connections)
            await client.pool.start()
            # two waves of idle closes (never-served connections, then their reopened ones),
            # then every connection is open again for good
            await server.until(lambda: server.closed_idle == 2 * connections
                               and server.accepted == 3 * connections)
            assert client.pool._failures == 0 and client.pool._backoff() == 0.0
            client.send(range(3 * connections))
            await server.until(lambda: len(client.answered) + len(client.failed)
                               == 3 * connections)
            assert client.failed == {}
            assert client.pool._failures == 0 and client.pool.live == connections
            await client.pool.close()

    run(scenario)


def test_a_server_that_accepts_then_closes_backs_off_and_fails_the_queued_requests() -> None:
    queued = 6

    async def scenario() -> None:
        async with Server(idle_closes=2) as server:
            client = Client(server, 2)
            await client.pool.start()
            server.refusing = True  # from the first idle close on, every reopen is refused
            await server.until(lambda: server.refused >= 1)
            client.send(range(queued))
            await server.until(lambda: len(client.failed) == queued)
            assert set(client.failed.values()) <= {"connect_error", "connection_reset"}
            assert client.answered == {}
            await server.until(lambda: client.pool._failures >= queued)
            assert client.pool._backoff() > 2 * BACKOFF_MIN_S
            # the backoff spaces the attempts: no hot loop of reconnects
            assert server.accepted <= 4 * queued
            await client.pool.close()

    run(scenario)


def test_a_good_connection_after_a_bad_patch_resets_the_backoff() -> None:
    async def scenario() -> None:
        async with Server(idle_closes=2) as server:
            client = Client(server, 1)
            await client.pool.start()
            server.refusing = True  # the first idle close starts the bad patch
            await server.until(lambda: client.pool._failures >= 4)
            assert client.pool._backoff() > BACKOFF_MIN_S
            server.refusing = False
            # a connection that settles, then is closed idle by the server, is a good one
            await server.until(lambda: server.closed_idle == 2)
            reopened = server.accepted + 1  # the client saw the close once it reconnects
            await server.until(lambda: server.accepted == reopened)
            assert client.pool._failures == 0 and client.pool._backoff() == 0.0
            client.send(range(3))
            await server.until(lambda: len(client.answered) + len(client.failed) == 3)
            assert client.failed == {} and client.pool._failures == 0
            await client.pool.close()

    run(scenario)


def test_settled_is_shorter_than_the_test_servers_idle_timeout() -> None:
    assert SETTLED_S < IDLE_S / 2
