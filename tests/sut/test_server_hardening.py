"""Server hardening: body bounds, overload, auth, TLS, drain, `loadgen serve`, module rules."""

from __future__ import annotations

import ast
import http.client
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import grpc
import numpy as np
import pytest

import oipwire as p
from loadgen.cli.exits import EXIT_USAGE
from loadgen.cli.main import main as cli_main
from oipwire.proto import grpc_predict_v2_pb2 as pb
from oipwire.proto import grpc_predict_v2_pb2_grpc as pb_grpc
from sut.server.core import ServerConfig
from sut.server.thread import ServerThread
from sut.service import build_service
from tests.served import read_line
from tests.sut import user_models

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[2]
GATED = "import:tests.sut.user_models:gated"
ONE_WORKER = {"input_shape": "4", "workers": "1", "max_batch_size": "1", "warmup": "1"}


def call(url: str, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None,
         context: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    conn = (http.client.HTTPSConnection(parts.hostname or "", parts.port, timeout=30,
                                        context=context) if context else
            http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30))
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def infer_body(name: str, rows: int, cols: int, **params: p.ParamValue) -> tuple[bytes, dict[str, str]]:
    x = np.ones((rows, cols), dtype=np.float32)
    return p.encode_request(p.InferRequest("", (p.InferTensor.from_numpy(name, x),), (), params))


def post_gated(server: ServerThread, **params: p.ParamValue) -> tuple[int, dict[str, str], bytes]:
    body, headers = infer_body("input", 1, 4, **params)
    return call(server.http_url, "POST", "/v2/models/gated/infer", body, headers)


def queue_depth(url: str) -> float:
    """`sut_queue_depth` of the mlp model, read from the server's /metrics."""
    status, _, text = call(url, "GET", "/metrics")
    assert status == 200
    rows = [row for row in text.decode().splitlines()
            if row.startswith('sut_queue_depth{model="mlp"} ')]
    return float(rows[0].rsplit(" ", 1)[1]) if rows else 0.0


def wait_for(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    give_up = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < give_up, "condition not reached in time"
        time.sleep(0.005)


@contextmanager
def gated_server(**config: Any) -> Iterator[ServerThread]:
    """A server of the gated model whose next batch waits until the test opens the gate."""
    options = {**ONE_WORKER, "max_queue_size": str(config.pop("max_queue_size", 1))}
    with ServerThread(build_service(GATED, options),
                      ServerConfig(http_port=0, grpc_port=0, **config)) as server:
        user_models.GATE.clear()
        user_models.ENTERED.clear()
        try:
            yield server
        finally:
            user_models.GATE.set()


def test_binds_loopback_by_default() -> None:
    assert ServerConfig().host == "127.0.0.1"


def test_ready_only_once_the_model_is_loaded() -> None:
    server = ServerThread(build_service("mlp", {"warmup": "0"}),
                          ServerConfig(http_port=0, grpc_port=0))
    server.start(load=False)
    try:
        url = server.http_url
        assert call(url, "GET", "/v2/health/live")[0] == 200
        status, _, data = call(url, "GET", "/v2/health/ready")
        assert status == 503 and "not loaded" in json.loads(data)["error"]
        body, headers = infer_body("input", 1, 256)
        assert call(url, "POST", "/v2/models/mlp/infer", body, headers)[0] == 503
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
            assert not stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
            assert not stub.ModelReady(pb.ModelReadyRequest(name="mlp"), timeout=10).ready
            server.load()
            assert stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
        assert call(url, "GET", "/v2/health/ready")[0] == 200
        assert call(url, "POST", "/v2/models/mlp/infer", body, headers)[0] == 200
    finally:
        server.stop()


@pytest.mark.parametrize("which", ["http_port", "grpc_port"])
def test_a_port_in_use_is_an_os_error(which: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        ports = {"http_port": 0, "grpc_port": 0, which: taken.getsockname()[1]}
        server = ServerThread(build_service("mlp", {}), ServerConfig(**ports))
        with pytest.raises(OSError, match="in use"):
            server.start(load=False)


def test_body_over_the_bound_gets_413_and_grpc_resource_exhausted() -> None:
    service = build_service("mlp", {"warmup": "0"})
    with ServerThread(service, ServerConfig(http_port=0, grpc_port=0,
                                            max_body_bytes=4096)) as server:
        body, headers = infer_body("input", 4, 256)
        status, _, data = call(server.http_url, "POST", "/v2/models/mlp/infer", body, headers)
        assert status == 413 and "4096-byte bound" in json.loads(data)["error"]

        def chunks() -> Iterator[bytes]:
            yield body[:3000]
            yield body[3000:]

        status, _, data = call(server.http_url, "POST", "/v2/models/mlp/infer",
                               chunks(), headers)  # type: ignore[arg-type]
        assert status == 413, data
        with grpc.insecure_channel(server.grpc_target) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            msg = pb.ModelInferRequest(model_name="mlp", raw_input_contents=[bytes(8192)])
            with pytest.raises(grpc.RpcError) as err:
                stub.ModelInfer(msg)
            assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        body, headers = infer_body("input", 1, 256)
        assert call(server.http_url, "POST", "/v2/models/mlp/infer", body, headers)[0] == 200


def test_overload_gets_429_and_resource_exhausted() -> None:
    with gated_server() as server, ThreadPoolExecutor(2) as pool, \
            grpc.insecure_channel(server.grpc_target) as channel:
        running = pool.submit(post_gated, server)
        assert user_models.ENTERED.wait(10)
        queued = pool.submit(post_gated, server)
        wait_for(lambda: server.server.service.stats()["waiting"] == 1)
        status, _, data = post_gated(server)
        assert status == 429 and "queue full" in json.loads(data)["error"]
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        msg = pb.ModelInferRequest(model_name="gated")
        msg.inputs.add(name="input", datatype="FP32", shape=[1, 4])
        msg.raw_input_contents.append(bytes(16))
        with pytest.raises(grpc.RpcError) as err:
            stub.ModelInfer(msg)
        assert err.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
        user_models.GATE.set()
        assert running.result(10)[0] == queued.result(10)[0] == 200
        assert server.server.service.stats()["requests"]["rejected"] == 2


def test_in_flight_cap_gets_429() -> None:
    with gated_server(max_queue_size=0, max_inflight=1) as server, ThreadPoolExecutor(1) as pool:
        running = pool.submit(post_gated, server)
        assert user_models.ENTERED.wait(10)
        status, _, data = post_gated(server)
        assert status == 429 and "in flight" in json.loads(data)["error"]
        user_models.GATE.set()
        assert running.result(10)[0] == 200


def test_queue_timeout_gets_504() -> None:
    with gated_server(max_queue_size=4) as server, ThreadPoolExecutor(1) as pool:
        running = pool.submit(post_gated, server)
        assert user_models.ENTERED.wait(10)
        status, _, data = post_gated(server, timeout=50_000)
        assert status == 504 and "expired" in json.loads(data)["error"]
        user_models.GATE.set()
        assert running.result(10)[0] == 200


@pytest.mark.parametrize("token", [None, "s3cret"])
def test_bearer_token(token: str | None) -> None:
    service = build_service("mlp", {"warmup": "0"})
    with ServerThread(service, ServerConfig(http_port=0, grpc_port=0,
                                            auth_token=token)) as server, \
            grpc.insecure_channel(server.grpc_target) as channel:
        body, headers = infer_body("input", 1, 256)
        url, path = server.http_url, "/v2/models/mlp/infer"
        good = {**headers, "Authorization": f"Bearer {token}"}
        assert call(url, "POST", path, body, good)[0] == 200
        assert call(url, "GET", "/v2/health/ready")[0] == 200
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert stub.ServerLive(pb.ServerLiveRequest()).live
        bearer = (("authorization", f"Bearer {token}"),)
        assert stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp"), metadata=bearer).name
        if token is None:
            assert call(url, "POST", path, body, headers)[0] == 200
            return
        for wrong in ({}, {"Authorization": "Bearer nope"}, {"Authorization": token}):
            status, got, data = call(url, "POST", path, body, {**headers, **wrong})
            assert status == 401 and got["WWW-Authenticate"] == "Bearer"
            assert "bearer token" in json.loads(data)["error"]
        assert call(url, "GET", "/metrics")[0] == 401
        retune = b'{"max_batch_size": 1}'
        assert call(url, "POST", "/v2/models/mlp/batcher", retune)[0] == 401
        assert service.batcher_config.max_batch_size != 1
        for metadata in ((), (("authorization", "Bearer nope"),)):
            with pytest.raises(grpc.RpcError) as err:
                stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp"), metadata=metadata)
            assert err.value.code() is grpc.StatusCode.UNAUTHENTICATED


def self_signed(tmp: Path) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_tls_on_both_protocols(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    service = build_service("mlp", {"warmup": "0"})
    config = ServerConfig(http_port=0, grpc_port=0, tls_cert=cert, tls_key=key)
    with ServerThread(service, config) as server:
        assert server.http_url.startswith("https://")
        context = ssl.create_default_context(cafile=str(cert))
        assert call(server.http_url, "GET", "/v2/health/ready", context=context)[0] == 200
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(server.grpc_target, creds) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
        with pytest.raises(ssl.SSLError):
            call(server.http_url, "GET", "/v2/health/ready", context=ssl.create_default_context())


def test_graceful_stop_drains_in_flight_requests() -> None:
    with gated_server(max_queue_size=8) as server, ThreadPoolExecutor(4) as pool, \
            grpc.insecure_channel(server.grpc_target) as channel:
        first = pool.submit(post_gated, server)
        assert user_models.ENTERED.wait(10)
        queued = [pool.submit(post_gated, server) for _ in range(2)]
        wait_for(lambda: server.server.service.stats()["waiting"] == 2)
        stopping: Future[None] = pool.submit(server.stop)
        wait_for(lambda: server.server.core.draining)
        status, _, data = post_gated(server)
        assert status == 503 and "shutting down" in json.loads(data)["error"]
        assert call(server.http_url, "GET", "/v2/health/ready")[0] == 503
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        assert not stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
        user_models.GATE.set()
        assert [f.result(10)[0] for f in (first, *queued)] == [200, 200, 200]
        stopping.result(20)
        with pytest.raises(OSError):
            call(server.http_url, "GET", "/v2/health/live")


def test_loadgen_serve_prints_ports_serves_and_drains_on_sigterm() -> None:
    cmd = [sys.executable, "-m", "loadgen", "serve", "--http-port", "0", "--grpc-port", "0",
           "--model", "mlp,max_queue_delay_us=300000,warmup=0"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        banner = read_line(proc, 60)
        assert banner.startswith("serving mlp http=127.0.0.1:"), banner
        url = "http://" + banner.split("http=")[1].split()[0]
        grpc_target = banner.split("grpc=")[1]
        assert read_line(proc, 60) == "ready mlp"
        assert call(url, "GET", "/v2/health/ready")[0] == 200
        with grpc.insecure_channel(grpc_target) as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            assert stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
        body, headers = infer_body("input", 1, 256)
        with ThreadPoolExecutor(2) as pool:
            pending = [pool.submit(call, url, "POST", "/v2/models/mlp/infer", body, headers)
                       for _ in range(2)]
            wait_for(lambda: queue_depth(url) == 2)  # both wait out the 300 ms batching delay
            proc.send_signal(signal.SIGTERM)
            assert [f.result(10)[0] for f in pending] == [200, 200]
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        proc.stderr.close()


def test_loadgen_serve_rejects_bad_options(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["serve", "--model", "nope"]) == EXIT_USAGE
    assert "unknown model 'nope'" in capsys.readouterr().err
    assert cli_main(["serve", "--model", "mlp,max_batch_size=0"]) == EXIT_USAGE
    assert "max_batch_size" in capsys.readouterr().err
    assert cli_main(["serve", "--model", "mlp", "--tls-cert", "c.pem"]) == EXIT_USAGE
    assert "both a certificate and a key" in capsys.readouterr().err


SERVER_FILES = sorted((ROOT / "sut" / "server").glob("*.py")) + [ROOT / "sut" / "metrics.py"]
UNSAFE_MODULES = {"pickle", "marshal", "shelve", "dill", "joblib"}
UNSAFE_CALLS = {"torch.load", "torch.jit.load", "np.load", "numpy.load", "eval", "exec"}


def imported(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


IMPORT_ALONE = """
import importlib, sys
import torch, numpy, aiohttp, grpc, prometheus_client  # heavy leaves, imported once
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules
                   if m.split(".")[0] in ("sut", "loadgen", "oipwire", "tests")]:
        del sys.modules[loaded]
    m = importlib.import_module(name)
    e = m.__all__
    assert sorted(e) == sorted(set(e)) and all(hasattr(m, n) for n in e), name
"""


def test_server_modules_declare_all_and_import_alone() -> None:
    names = [".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
             for path in SERVER_FILES]
    subprocess.run([sys.executable, "-c", IMPORT_ALONE, *names], cwd=ROOT, check=True,
                   timeout=120)


@pytest.mark.parametrize("path", SERVER_FILES, ids=lambda path: path.name)
def test_server_never_imports_loadgen_and_never_unpickles(path: Path) -> None:
    for module in imported(path):
        assert not module.startswith("loadgen"), (path, module)  # the protocol is oipwire's
        assert module.split(".")[0] not in UNSAFE_MODULES, (path, module)
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            assert ast.unparse(node.func) not in UNSAFE_CALLS, (path, ast.unparse(node))
