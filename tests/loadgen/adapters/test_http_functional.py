"""The HTTP OIP adapter: its spec, head parsing and connection pool; end to end, what only
HTTP has (connection resets, TLS). The scenarios it shares with gRPC: test_oip_functional."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.adapters.http import HttpSut, Timings
from loadgen.adapters.registry import make_sut
from loadgen.adapters.wire import fasthttp
from loadgen.adapters.wire.fasthttp import HttpPool, parse_head
from loadgen.adapters.wire.queueing import Job, Pending
from loadgen.api import run_async, run_loop
from loadgen.errors import SutError, SutSpecError
from loadgen.plan.settings import load_settings
from tests.loadgen.adapters.oiprun import COMPONENTS, SERVER, as_dict, run
from tests.oipwire.oip_echo import Behaviour, EchoServer, spawn

# -- pure parts ------------------------------------------------------------------------------


def test_spec_and_options() -> None:
    sut = make_sut("https://example.org/m?connections=4&max_in_flight=2&binary=0&token=zz9&batch=3")
    assert isinstance(sut, HttpSut)
    assert (sut.connections, sut.max_in_flight, sut.binary, sut.batch) == (2, 2, False, 3)
    info = sut.describe()
    assert info["endpoint"] == "https://example.org:443/m" and "zz9" not in str(info)
    assert (info["protocol"], info["tls"], info["model"]) == ("http", True, "m")
    assert make_sut("http://h:8000/m?tls=1").describe()["tls"] is True
    for spec, word in [("http://h:1/m?bogus=1", "bogus"), ("http://h:1/m?connections=x", "integer"),
                       ("http://h:1/m?binary=2", "0 or 1"), ("http://h:1/", "model"),
                       ("http://h:1/a/b", "model"), ("http://h:1/m?connections=0", "at least"),
                       ("https://h:1/m?ca=/no/such/file", "ca")]:
        with pytest.raises(SutSpecError, match=word):
            make_sut(spec)


def test_parse_head() -> None:
    extra = b"\r\ninference-header-content-length:"
    assert parse_head(b"HTTP/1.1 200 OK\r\nContent-Length: 12\r\n"
                      b"Inference-Header-Content-Length: 5", extra) == (200, 12, True, 5)
    assert parse_head(b"HTTP/1.1 429 x\r\ncontent-length:0\r\nConnection: close") == (
        429, 0, False, -1)
    assert parse_head(b"HTTP/1.0 200 OK\r\nContent-Length: 1")[2] is False
    for bad in (b"HTTP/1.1 101 Switching Protocols", b"HTTP/1.1 2x0 OK", b"SSH-2",
                b"HTTP/1.1 200 OK\r\nContent-Length: -1"):
        with pytest.raises(ValueError):
            parse_head(bad)


def test_timings_template_agrees_with_scan() -> None:
    timings = Timings()
    doc = (b'{"parameters":{"queue_ns":%d, "compute_ns" : 7,"other":"x","server_total_ns":%d},'
           b'"outputs":[]}')
    assert timings.read(doc % (5, 9)) == {"queue": 5, "compute": 7, "server_total": 9}
    assert timings.read(doc % (11, 12)) == {"queue": 11, "compute": 7, "server_total": 12}
    assert timings.read(b'{"parameters":{"batch_size":3}}') == {"batch_size": 3}
    assert timings.read(b'{"outputs":[]}') == {}


def test_pending_yields_job_parts_lazily() -> None:
    encoded: list[list[int]] = []

    def encode(rows: Sequence[int]) -> int:
        encoded.append(list(rows))
        return len(encoded)

    job = Job(7, np.arange(5), 2, encode)
    pending: Pending[int] = Pending()
    pending.put(1, 100)
    pending.put_job(job)
    assert pending.pop() == (1, 100) and encoded == []
    assert [pending.pop() for _ in range(4)] == [((job, 0), 1), ((job, 2), 2), ((job, 4), 3), None]
    assert encoded == [[0, 1], [2, 3], [4]]


class _Transport:
    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.sent.append(data)


def _pool_with_one_connection() -> tuple[HttpPool, Any, list[tuple[Any, ...]]]:
    answered: list[tuple[Any, ...]] = []
    pool = HttpPool("h", 1, 1, lambda *args: answered.append(args), lambda *args: None)
    conn = fasthttp._Connection(pool)
    conn.connection_made(_Transport())  # type: ignore[arg-type]
    return pool, conn, answered


def test_answer_carries_its_own_send_time_when_the_next_is_queued() -> None:
    pool, conn, answered = _pool_with_one_connection()
    pool.submit("a", b"A")
    pool.submit("b", b"B")  # queued behind "a"
    sent_a = conn.sent_ns
    conn.data_received(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert conn.tag == "b" and conn.sent_ns >= sent_a
    tag, status, buf, start, extra, sent_ns, done_ns = answered[0]
    assert (tag, status, bytes(buf[start:]), extra) == ("a", 200, b"ok", -1)
    assert sent_ns == sent_a <= done_ns


def test_response_heads_are_parsed_once_and_the_cache_is_bounded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    pool, conn, answered = _pool_with_one_connection()
    parses: list[bytes] = []
    real = fasthttp.parse_head

    def counted(raw: bytes, extra: bytes = b"") -> tuple[int, int, bool, int]:
        parses.append(raw)
        return real(raw, extra)

    monkeypatch.setattr(fasthttp, "parse_head", counted)
    monkeypatch.setattr(fasthttp, "HEAD_CACHE", 2)
    heads = [b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % n for n in (1, 1, 2, 2, 3, 1)]
    for head in heads:
        pool.submit(len(answered), b"x")
        conn.data_received(head)  # split: head first, body after
        conn.data_received(b"z" * int(head[-5:-4]))
    assert [a[0] for a in answered] == list(range(6))
    assert len(parses) == 4 and len(pool._heads) <= 2  # 1, 2, 3 (clears), 1 again


# -- end to end ------------------------------------------------------------------------------


@pytest.mark.functional
def test_connection_reset_mid_run_functional() -> None:
    with spawn(reset_every=25) as server:
        result = run(HttpSut.from_spec(server.http("connections=4")), SERVER)
    assert set(result["errors_by_kind"]) == {"connection_reset"} and not result["valid"]
    assert all(m.startswith("connection") for m in
               result["errors_detail"]["connection_reset"]["messages"])
    assert result["errors"] >= 10 and result["queries"] >= 200 and result["unfinished"] == 0


@pytest.mark.functional
@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl tool")
def test_https_functional(tmp_path: Path) -> None:
    import ssl

    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)

    async def main(query: str) -> dict[str, Any]:
        server = EchoServer(Behaviour(), context)
        port, _ = await server.start()
        try:
            sut = HttpSut.from_spec(f"https://127.0.0.1:{port}/echo?{query}")
            settings = load_settings(None, [*SERVER, "min_duration_s=0.5", "max_issue_lag_ms=100"])
            return as_dict(await run_async(settings, sut))
        finally:
            await server.stop()

    for query in (f"ca={cert}", "insecure=1"):
        result = run_loop(main(query))
        assert result["errors"] == 0 and result["sut"]["tls"] is True, result["errors_by_kind"]
        assert COMPONENTS <= set(result["components_ns"])
    with pytest.raises(SutError, match="CERTIFICATE_VERIFY_FAILED"):
        run_loop(main("connections=1"))
