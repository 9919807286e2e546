"""loadgen's HTTP adapter against an OIP server on another stack (Starlette on uvicorn/h11),
which answers binary requests chunked with a lower-case header length and no Content-Type,
as KServe's ModelServer does. The server runs as a subprocess on loopback, bounded in time,
stopped by pid."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.api import run_test
from loadgen.errors import SutError
from loadgen.plan.settings import load_settings
from tests.served import port_server

pytest.importorskip("uvicorn", reason="needs uvicorn (the dev extra)")
pytest.importorskip("starlette", reason="needs starlette (the dev extra)")

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[2]
BASE = ["preset='dev'", "min_duration_s=1", "max_issue_lag_ms=50"]
SCENARIOS = {  # Server: 0 of 500 over the SLO passes early stopping at p99 (459 needed)
    "Server": ["scenario='Server'", "warmup_s=0.3", "target_qps=400", "target_latency_ms=500",
               "min_query_count=500"],
    "Offline": ["scenario='Offline'", "target_qps=100000", "min_duration_s=0.5",
                "min_query_count=1"],  # 55,000 samples: above 0.5 s below 110k samples/s
    "SingleStream": ["scenario='SingleStream'", "min_query_count=50"],
}


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    """The server's port (stopped by pid at the end of the module)."""
    with port_server("tests.thirdparty.oip_starlette_server") as port:
        yield port


def _exchange(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request)
        data = b""
        while not data.endswith(b"0\r\n\r\n") and len(data) < 1 << 16:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


def test_the_server_answers_as_kserve_does(port: int) -> None:
    header = (b'{"inputs":[{"name":"x","datatype":"FP32","shape":[1,4],"parameters":'
              b'{"binary_data_size":16}}],"parameters":{"binary_data_output":true}}')
    body = header + bytes(16)
    raw = _exchange(port, b"POST /v2/models/sum/infer HTTP/1.1\r\nHost: x\r\n"
                    b"Content-Type: application/octet-stream\r\n"
                    b"Inference-Header-Content-Length: %d\r\nContent-Length: %d\r\n\r\n"
                    % (len(header), len(body)) + body)
    head = raw.split(b"\r\n\r\n")[0].lower()
    assert head.startswith(b"http/1.1 200")
    assert b"\r\ntransfer-encoding: chunked" in head and b"\r\ninference-header-content-length:" \
        in head and b"\r\ncontent-type" not in head and b"\r\ncontent-length" not in head


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_runs_are_valid(port: int, scenario: str) -> None:
    settings = load_settings(None, [*BASE, *SCENARIOS[scenario]])
    result = run_test(settings, f"http://127.0.0.1:{port}/sum?connections=8")
    assert result.valid, (result.verdict.codes, result.stats)


def test_json_outputs_valid(port: int) -> None:
    settings = load_settings(None, [*BASE, *SCENARIOS["Offline"]])
    result = run_test(settings, f"http://127.0.0.1:{port}/sum?connections=4&outputs=json")
    assert result.valid, (result.verdict.codes, result.stats)


def test_versioned_urls_answering_501_say_what_to_do(port: int) -> None:
    settings = load_settings(None, [*BASE, *SCENARIOS["Offline"]])
    with pytest.raises(SutError, match=r"HTTP 501 .*versioning is not supported.*drop version=1"):
        run_test(settings, f"http://127.0.0.1:{port}/sum?version=1")


def test_unknown_model_shows_the_servers_detail(port: int) -> None:
    settings = load_settings(None, [*BASE, *SCENARIOS["Offline"]])
    with pytest.raises(SutError, match=r"HTTP 404 Not Found: Model with name nope does not"):
        run_test(settings, f"http://127.0.0.1:{port}/nope")
