"""Connection hygiene (`sut.server.connections`): idle and slow clients closed on time,
a connection over the cap refused, the server answering meanwhile, `/metrics` counting."""

from __future__ import annotations

import http.client
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import numpy as np
import pytest

import oipwire as p
from loadgen.cli.main import main as cli_main
from loadgen.record.hostload import sample_host
from sut.server.core import ServerConfig
from sut.server.thread import ServerThread
from sut.service import build_service
from tests.fairness import skip_if_busy_since

IDLE_S, READ_S, MARGIN_S = 1.0, 0.5, 1.5
MLP = {"workers": "1", "max_batch_size": "4", "warmup": "0"}
SLOW_HEAD = b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Le"
SLOW_BODY = (b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
             b"\r\nContent-Length: 100\r\n\r\n{\"inputs\":")


@contextmanager
def served(**config: float) -> Iterator[ServerThread]:
    with ServerThread(build_service("mlp", MLP),
                      ServerConfig(http_port=0, grpc_port=0, **config)) as server:  # type: ignore[arg-type]
        yield server


def connect(server: ServerThread, stack: ExitStack, first: bytes = b"") -> socket.socket:
    sock = stack.enter_context(socket.create_connection(("127.0.0.1", server.server.http_port),
                                                        timeout=5))
    if first:
        sock.sendall(first)
    return sock


def closed_after(socks: list[socket.socket], began: float, limit_s: float) -> dict[int, float]:
    """Seconds from `began` until each socket read EOF or a reset (missing: still open)."""
    when: dict[int, float] = {}
    with selectors.DefaultSelector() as selector:
        for i, sock in enumerate(socks):
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, i)
        while len(when) < len(socks) and time.monotonic() - began < limit_s:
            for key, _ in selector.select(0.05):
                sock = socks[key.data]
                try:
                    data = sock.recv(4096)
                except ConnectionError:
                    data = b""
                assert data == b"", f"unexpected answer {data[:80]!r}"
                when[key.data] = time.monotonic() - began
                selector.unregister(sock)
    return when


def infer_ok(server: ServerThread, stop: threading.Event, answers: list[int]) -> None:
    """Infer over keep-alive until `stop`, appending each status."""
    x = np.ones((1, 256), dtype=np.float32)
    body, headers = p.encode_request(p.InferRequest("", (p.InferTensor.from_numpy("input", x),),
                                                    (), {}))
    conn = http.client.HTTPConnection("127.0.0.1", server.server.http_port, timeout=10)
    try:
        while not stop.is_set():
            conn.request("POST", "/v2/models/mlp/infer", body=body, headers=headers)
            resp = conn.getresponse()
            resp.read()
            answers.append(resp.status)
            time.sleep(0.02)
    finally:
        conn.close()


def metric(server: ServerThread, line: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", server.server.http_port, timeout=10)
    try:
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
    finally:
        conn.close()
    values = [float(row.rsplit(" ", 1)[1]) for row in text.splitlines()
              if row.startswith(line + " ")]
    assert values, f"{line} not in /metrics"
    return values[0]


@pytest.mark.serial  # closes timed to the idle and read timeouts; skips on a loaded host
@pytest.mark.functional
def test_idle_and_slow_connections_are_closed_on_time_while_infer_goes_on() -> None:
    with served(idle_timeout_s=IDLE_S, read_timeout_s=READ_S) as server, ExitStack() as stack:
        stop, answers = threading.Event(), list[int]()
        worker = threading.Thread(target=infer_ok, args=(server, stop, answers))
        worker.start()
        try:
            host, began = sample_host(), time.monotonic()
            idle = [connect(server, stack) for _ in range(200)]
            slow = [connect(server, stack, SLOW_HEAD) for _ in range(200)]
            slow += [connect(server, stack, SLOW_BODY) for _ in range(20)]
            setup_s = time.monotonic() - began
            when = closed_after(slow + idle, began, IDLE_S + setup_s + MARGIN_S + 1)
        finally:
            stop.set()
            worker.join(15)
        slow_s = [when[i] for i in range(len(slow)) if i in when]
        idle_s = [when[i] for i in range(len(slow), len(slow) + len(idle)) if i in when]
        late = len(when) < len(slow) + len(idle) or max(slow_s) > READ_S + setup_s + MARGIN_S \
            or max(idle_s) > IDLE_S + setup_s + MARGIN_S
        if late:
            skip_if_busy_since(host, f"{len(slow) + len(idle) - len(when)} connections open "
                               f"after {IDLE_S + setup_s + MARGIN_S + 1:.1f} s, the last slow "
                               f"one closed at {max(slow_s, default=0):.2f} s, the last idle one "
                               f"at {max(idle_s, default=0):.2f} s")
        assert len(when) == len(slow) + len(idle), "some connections stayed open"
        assert READ_S * 0.9 <= min(slow_s) and max(slow_s) <= READ_S + setup_s + MARGIN_S
        assert IDLE_S * 0.9 <= min(idle_s) and max(idle_s) <= IDLE_S + setup_s + MARGIN_S
        assert len(answers) >= 10 and set(answers) == {200}
        closed = 'sut_connections_closed_total{protocol="http",reason="%s"}'
        assert metric(server, closed % "slow_read") >= len(slow)
        assert metric(server, closed % "idle") >= len(idle)
        assert metric(server, 'sut_connections_open{protocol="http"}') >= 1  # the scrape


@pytest.mark.functional
def test_a_connection_over_the_cap_gets_503_naming_it_and_is_closed() -> None:
    with served(max_connections=50) as server, ExitStack() as stack:
        held = [connect(server, stack) for _ in range(50)]
        give_up = time.monotonic() + 10
        while server.server.connections.open < len(held):
            assert time.monotonic() < give_up
            time.sleep(0.01)
        extra = connect(server, stack)
        data = b""
        while chunk := extra.recv(4096):
            data += chunk
        assert data.startswith(b"HTTP/1.1 503 ") and b"50-connection cap" in data
        held.pop().close()
        give_up = time.monotonic() + 10
        while server.server.connections.open >= 50:
            assert time.monotonic() < give_up
            time.sleep(0.01)
        closed = 'sut_connections_closed_total{protocol="http",reason="refused"}'
        assert metric(server, closed) == 1


@pytest.mark.serial  # closes timed to the timeouts; skips on a loaded host
@pytest.mark.functional
def test_grpc_closes_silent_and_idle_connections_on_time() -> None:
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes(3) + b"\x04" + bytes(5)  # + SETTINGS
    with served(idle_timeout_s=IDLE_S, read_timeout_s=READ_S) as server, ExitStack() as stack:
        host, began = sample_host(), time.monotonic()
        port = server.server.grpc_port
        socks = [stack.enter_context(socket.create_connection(("127.0.0.1", port), timeout=5))
                 for _ in range(100)]
        for sock in socks[50:]:
            sock.sendall(preface)
        seen: dict[int, bytes] = {}
        give_up = began + IDLE_S + MARGIN_S + 2
        with selectors.DefaultSelector() as selector:
            for i, sock in enumerate(socks):
                sock.setblocking(False)
                selector.register(sock, selectors.EVENT_READ, i)
                seen[i] = b""
            done: dict[int, float] = {}
            while len(done) < len(socks) and time.monotonic() < give_up:
                for key, _ in selector.select(0.05):
                    try:
                        chunk = socks[key.data].recv(4096)
                    except ConnectionError:
                        chunk = b""
                    seen[key.data] += chunk
                    if not chunk:
                        done[key.data] = time.monotonic() - began
                        selector.unregister(socks[key.data])
        silent = [done[i] for i in range(50) if i in done]
        idle = [done[i] for i in range(50, 100) if i in done]
        if len(done) < len(socks) or max(silent) > READ_S + MARGIN_S \
                or max(idle) > IDLE_S + MARGIN_S:
            skip_if_busy_since(host, f"{len(socks) - len(done)} gRPC connections open after "
                               f"{IDLE_S + MARGIN_S + 2:.1f} s, the last silent one closed at "
                               f"{max(silent, default=0):.2f} s, the last idle one at "
                               f"{max(idle, default=0):.2f} s")
        assert len(done) == len(socks), "some gRPC connections stayed open"
        assert max(done[i] for i in range(50)) <= READ_S + MARGIN_S
        assert all(b"handshake timeout" in seen[i] for i in range(50))
        assert min(done[i] for i in range(50, 100)) >= IDLE_S * 0.9
        assert max(done[i] for i in range(50, 100)) <= IDLE_S + MARGIN_S
        assert all(b"connection idle" in seen[i] for i in range(50, 100))


def test_config_names_every_bad_bound() -> None:
    with pytest.raises(ValueError) as info:
        ServerConfig(idle_timeout_s=0, read_timeout_s=-1, max_connections=0, max_streams=0)
    for key in ("idle_timeout_s", "read_timeout_s", "max_connections", "max_streams"):
        assert f"{key} must be > 0" in str(info.value)
    with pytest.raises(ValueError, match="at most 86400"):
        ServerConfig(idle_timeout_s=1e9)


def test_serve_rejects_a_bad_bound(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["serve", "--model", "mlp", "--max-connections", "0"]) == 2
    assert "max_connections must be > 0" in capsys.readouterr().err
