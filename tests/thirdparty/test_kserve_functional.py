"""loadgen against KServe's own `ModelServer` (uvicorn/FastAPI and grpc.aio), over HTTP and
gRPC: Server, Offline and SingleStream VALID. KServe runs in its own virtualenv (its proto
package `inference` clashes with ours in one process), named by `LOADGEN_KSERVE_PYTHON`:

    python3 -m venv /tmp/kserve && /tmp/kserve/bin/pip install kserve==0.21.0
    LOADGEN_KSERVE_PYTHON=/tmp/kserve/bin/python pytest tests/thirdparty -m functional

Skipped when it is not set. The server binds loopback only, lives at most 180 s, and is
stopped by pid."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.api import run_test
from loadgen.plan.settings import load_settings
from tests.served import stop
from tests.thirdparty.test_starlette_functional import BASE, SCENARIOS

PYTHON = os.environ.get("LOADGEN_KSERVE_PYTHON", "")
SERVER = Path(__file__).with_name("kserve_sum_server.py")

pytestmark = [pytest.mark.functional,
              pytest.mark.skipif(not PYTHON, reason="LOADGEN_KSERVE_PYTHON names no "
                                 "interpreter with kserve installed")]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ready(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"GET /v2/models/sum/ready HTTP/1.1\r\nHost: x\r\n\r\n")
            return sock.recv(64).startswith(b"HTTP/1.1 200")
    except OSError:
        return False


@pytest.fixture(scope="module")
def ports() -> Iterator[tuple[int, int]]:
    """(http, grpc) ports of a running KServe ModelServer."""
    http, grpc = _free_port(), _free_port()
    proc = subprocess.Popen([PYTHON, str(SERVER), "--http_port", str(http), "--grpc_port",
                             str(grpc), "--lifetime-s", "180"], cwd="/",
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not _ready(http):
            assert proc.poll() is None, f"KServe exited with {proc.returncode}"
            assert time.monotonic() < deadline, "KServe was not ready in 60 s"
            time.sleep(0.2)
        yield http, grpc
    finally:
        stop(proc, 15)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_runs_against_kserve_are_valid(ports: tuple[int, int], protocol: str,
                                       scenario: str) -> None:
    port = ports[0] if protocol == "http" else ports[1]
    settings = load_settings(None, [*BASE, *SCENARIOS[scenario]])
    result = run_test(settings, f"{protocol}://127.0.0.1:{port}/sum")
    assert result.valid, (result.verdict.codes, result.stats.errors_detail)
