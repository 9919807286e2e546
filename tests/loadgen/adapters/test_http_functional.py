"""The HTTP OIP adapter end to end through the engine, against the loopback echo server."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.adapters.base import SystemUnderTest
from loadgen.adapters.http import HttpSut, Timings
from loadgen.adapters.registry import make_sut
from loadgen.adapters.wire import fasthttp
from loadgen.adapters.wire.fasthttp import HttpPool, parse_head
from loadgen.adapters.wire.queueing import Job, Pending
from loadgen.api import run_async, run_loop
from loadgen.errors import SutError, SutSpecError
from loadgen.plan.settings import load_settings
from tests.fairness import skip_if_host_busy, skip_if_host_unfair
from tests.oipwire.oip_echo import Behaviour, EchoServer, spawn

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
    """One run on uvloop; `during()` is called once 20 measured queries completed."""
    monitors = [_After(during)] if during is not None else []
    coro = run_async(load_settings(None, overrides), sut, monitors=monitors)
    return as_dict(run_loop(asyncio.wait_for(coro, 60)))


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


@pytest.fixture(scope="module")
def echo() -> Any:
    with spawn(sleep_ms=1) as server:
        yield server


@pytest.mark.functional
def test_server_scenario_valid_with_components_functional(echo: Any) -> None:
    result = run(HttpSut.from_spec(echo.http("connections=8")), SERVER)
    skip_if_host_unfair(result)
    assert result["valid"], result["reasons"]
    assert COMPONENTS <= set(result["components_ns"])
    assert result["components_ns"]["compute"]["p50"] >= 900_000
    assert result["sut"]["protocol"] == "http" and result["sut"]["binary"] is True
    assert result["errors"] == 0 and result["batch_sizes"] == {"1": result["queries"]}


@pytest.mark.functional
def test_offline_valid_in_batches_functional(echo: Any) -> None:
    result = run(HttpSut.from_spec(echo.http("connections=1&batch=8")), OFFLINE)
    assert result["valid"], result["reasons"]
    assert result["samples"] == 11000 and COMPONENTS <= set(result["components_ns"])
    assert set(result["batch_sizes"]) == {"8"}


@pytest.mark.functional
def test_json_bodies_token_and_multistream_functional() -> None:
    with spawn(token="s3cret") as server:
        ok = run(HttpSut.from_spec(server.http("binary=0&token=s3cret")),
                 [*SERVER, "scenario='MultiStream'", "min_query_count=50", "min_duration_s=0.3"])
        assert ok["valid"], ok["reasons"]
        assert ok["batch_sizes"] == {"8": ok["queries"]}
        bad = run(HttpSut.from_spec(server.http("token=wrong")), [*SERVER, "min_duration_s=0.3"])
    assert set(bad["errors_by_kind"]) == {"http_401"} and not bad["valid"]


@pytest.mark.functional
@pytest.mark.parametrize("status", [503, 429])
def test_http_errors_counted_by_kind_functional(status: int) -> None:
    with spawn(fail_every=4, fail_status=status) as server:
        result = run(HttpSut.from_spec(server.http()), [*SERVER, "warmup_s=0"])
    errors = result["errors_by_kind"]
    assert set(errors) == {f"http_{status}"} and not result["valid"]
    assert abs(result["errors"] / (result["queries"] + result["errors"]) - 0.25) < 0.05
    assert result["unfinished"] == 0
    messages = result["errors_detail"][f"http_{status}"]["messages"]  # status line + message
    assert messages and all(m.startswith(f"HTTP {status} ") for m in messages), messages


@pytest.mark.functional
def test_connection_reset_mid_run_functional() -> None:
    with spawn(reset_every=25) as server:
        result = run(HttpSut.from_spec(server.http("connections=4")), SERVER)
    assert set(result["errors_by_kind"]) == {"connection_reset"} and not result["valid"]
    assert all(m.startswith("connection") for m in
               result["errors_detail"]["connection_reset"]["messages"])
    assert result["errors"] >= 10 and result["queries"] >= 200 and result["unfinished"] == 0


@pytest.mark.functional
def test_query_timeout_functional() -> None:
    with spawn(hang_every=20) as server:
        result = run(HttpSut.from_spec(server.http("timeout_ms=100")), SERVER)
    assert set(result["errors_by_kind"]) == {"timeout"} and result["unfinished"] == 0
    if result["queries"] < 200 or result["errors"] > result["queries"] / 10:  # 1 in 20 hangs
        skip_if_host_busy(result, f"{result['errors']} of {result['errors'] + result['queries']}"
                                  " queries unanswered in 100 ms where 1 in 20 hangs")
    assert result["errors_detail"]["timeout"]["messages"] == ["no answer in 100 ms"]
    assert result["errors"] >= 10 and result["queries"] >= 200  # min_query_count: the run waits


@pytest.mark.functional
def test_server_killed_mid_run_functional() -> None:
    with spawn(sleep_ms=1) as server:
        started = time.monotonic()
        result = run(HttpSut.from_spec(server.http("connections=8")),
                     [*SERVER, "min_duration_s=1.5"], during=server.proc.kill)
        elapsed = time.monotonic() - started
    errors = result["errors_by_kind"]
    assert not result["valid"] and result["unfinished"] == 0 and elapsed < 9
    assert set(errors) <= {"connection_reset", "connect_error"} and errors.get("connect_error")
    assert result["queries"] >= 20 and result["errors"] >= 100  # killed after 20 answers


@pytest.mark.functional
def test_start_fails_cleanly_functional() -> None:
    async def start(spec: str) -> None:
        await HttpSut.from_spec(spec).start(None, None)  # type: ignore[arg-type]

    with spawn() as server:
        with pytest.raises(SutError, match="not ready"):
            run_loop(start(server.http().replace("/echo", "/nope")))
        port = server.http_port
    with pytest.raises(SutError, match=f"127.0.0.1:{port}"):
        run_loop(start(f"http://127.0.0.1:{port}/echo"))


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
