"""A minimal Open Inference Protocol server (HTTP on aiohttp, gRPC on grpc.aio) for tests.

Model `echo`: input `x` and output `y`, FP32 [-1, 4]; `y` is `x`. Every answer carries
some of the timing parameters of `oipwire.timing` (`queue_ns`, `batch_formation_ns`,
`compute_ns`, `server_total_ns`, `batch_size`), as a server that measures less would.
`Behaviour` injects faults by request count: every `fail_every`-th infer answers
`fail_status` (HTTP) / `fail_code` (gRPC), every `reset_every`-th drops the HTTP
connection, every `hang_every`-th is never answered. In process: `await EchoServer(...).start()`;
as a process: `python -m tests.oipwire.oip_echo [--sleep-ms 1 ...]` prints
`{"http": PORT, "grpc": PORT}` on one line, then serves until killed (`spawn` does this).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import select
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
from aiohttp import web

import oipwire as p
from oipwire.proto import grpc_predict_v2_pb2 as pb
from oipwire.proto import grpc_predict_v2_pb2_grpc as pb_grpc

__all__ = ["MODEL", "Behaviour", "Echo", "EchoServer", "main", "spawn"]

MODEL = "echo"
ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
_METADATA = p.model_metadata(MODEL, ["1"], "echo", [("x", "FP32", [-1, 4])],
                             [("y", "FP32", [-1, 4])])


@dataclass(frozen=True)
class Echo:
    """A server process and its ports."""

    proc: subprocess.Popen[str]
    http_port: int
    grpc_port: int

    def http(self, query: str = "") -> str:
        """The http:// spec of model `echo`, options `query`."""
        return f"http://127.0.0.1:{self.http_port}/{MODEL}" + (f"?{query}" if query else "")

    def grpc(self, query: str = "") -> str:
        """The grpc:// spec of model `echo`, options `query`."""
        return f"grpc://127.0.0.1:{self.grpc_port}/{MODEL}" + (f"?{query}" if query else "")


@dataclass
class Behaviour:
    """What the server does; counts are over infer requests, 0 = never."""

    sleep_ms: float = 0.0
    fail_every: int = 0
    fail_status: int = 503
    fail_code: str = "UNAVAILABLE"
    reset_every: int = 0
    hang_every: int = 0
    token: str = ""


class EchoServer:
    """Both front ends on one loop, on loopback ports chosen by the OS."""

    def __init__(self, behaviour: Behaviour | None = None,
                 ssl_context: ssl.SSLContext | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.ssl = ssl_context
        self.requests = 0
        self.http_port = self.grpc_port = 0
        self._runner: web.AppRunner | None = None
        self._grpc: grpc.aio.Server | None = None
        self._stopped = asyncio.Event()

    async def start(self) -> tuple[int, int]:
        """Listen; returns (http port, grpc port)."""
        app = web.Application()
        app.router.add_get("/v2/health/{what}", self._ready)
        for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
            app.router.add_get(prefix, self._metadata)
            app.router.add_get(prefix + "/ready", self._ready)
            app.router.add_post(prefix + "/infer", self._infer_http)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.http_port = sock.getsockname()[1]
        await web.SockSite(self._runner, sock, ssl_context=self.ssl).start()
        self._grpc = grpc.aio.server()
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(  # type: ignore[no-untyped-call]
            _Servicer(self), self._grpc)
        self.grpc_port = self._grpc.add_insecure_port("127.0.0.1:0")
        await self._grpc.start()
        return self.http_port, self.grpc_port

    async def stop(self) -> None:
        """Stop both; hung requests are released."""
        self._stopped.set()
        if self._grpc is not None:
            await self._grpc.stop(0)
        if self._runner is not None:
            await self._runner.cleanup()

    def tick(self) -> str:
        """Count an infer request; the fault it must show: '', 'fail', 'reset' or 'hang'."""
        self.requests += 1
        n, b = self.requests, self.behaviour
        for every, fault in ((b.fail_every, "fail"), (b.reset_every, "reset"),
                             (b.hang_every, "hang")):
            if every and n % every == 0:
                return fault
        return ""

    async def compute(self, fault: str, x: p.InferTensor, t0: int) -> p.InferResponse:
        """Sleep (or hang) as told; the echo response with its timings."""
        if fault == "hang":
            await self._stopped.wait()
        t1 = time.perf_counter_ns()
        if self.behaviour.sleep_ms:
            await asyncio.sleep(self.behaviour.sleep_ms / 1000)
        t2 = time.perf_counter_ns()
        timings = {p.QUEUE_NS: t1 - t0, p.BATCH_FORMATION_NS: 0, p.COMPUTE_NS: t2 - t1,
                   p.BATCH_SIZE: x.shape[0] if x.shape else 1}
        y = p.InferTensor("y", x.datatype, x.shape, x.data)
        return p.InferResponse(MODEL, "1", outputs=(y,),
                               parameters={**timings, p.SERVER_TOTAL_NS: 0})

    def authorized(self, value: str | None) -> bool:
        """Whether an Authorization value passes (any, when no token is set)."""
        return not self.behaviour.token or value == f"Bearer {self.behaviour.token}"

    # -- HTTP ---------------------------------------------------------------------------------

    async def _ready(self, request: web.Request) -> web.Response:
        if request.match_info.get("model", MODEL) != MODEL:
            return web.Response(status=404, body=p.error_body("no such model"))
        return web.Response()

    async def _metadata(self, request: web.Request) -> web.Response:
        if request.match_info["model"] != MODEL:
            return web.Response(status=404, body=p.error_body("no such model"))
        return web.json_response(_METADATA)

    async def _infer_http(self, request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter_ns()
        if not self.authorized(request.headers.get("Authorization")):
            return web.Response(status=401, body=p.error_body("bad token"))
        fault = self.tick()
        if fault == "reset" and request.transport is not None:
            request.transport.abort()
            return web.Response(status=500)
        if fault == "fail":
            return web.Response(status=self.behaviour.fail_status, body=p.error_body("injected"))
        try:
            req = p.decode_request(await request.read(), request.headers.get(p.HEADER_LENGTH))
        except p.ProtocolError as exc:
            return web.Response(status=400, body=p.error_body(str(exc)))
        resp = await self.compute(fault, req.inputs[0], t0)
        resp.parameters[p.SERVER_TOTAL_NS] = time.perf_counter_ns() - t0
        body, headers = p.encode_response(resp, p.binary_outputs_requested(req))
        return web.Response(body=body, headers=headers)


class _Servicer(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, server: EchoServer) -> None:
        self.server = server

    async def ServerLive(self, request: pb.ServerLiveRequest,
                         context: grpc.aio.ServicerContext) -> pb.ServerLiveResponse:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: pb.ServerReadyRequest,
                          context: grpc.aio.ServicerContext) -> pb.ServerReadyResponse:
        return pb.ServerReadyResponse(ready=True)

    async def ModelReady(self, request: pb.ModelReadyRequest,
                         context: grpc.aio.ServicerContext) -> pb.ModelReadyResponse:
        return pb.ModelReadyResponse(ready=request.name == MODEL)

    async def ModelMetadata(self, request: pb.ModelMetadataRequest,
                            context: grpc.aio.ServicerContext) -> pb.ModelMetadataResponse:
        if request.name != MODEL:
            await context.abort(grpc.StatusCode.NOT_FOUND, "no such model")
        doc = dict(_METADATA)
        doc["inputs"] = [pb.ModelMetadataResponse.TensorMetadata(**t) for t in doc["inputs"]]
        doc["outputs"] = [pb.ModelMetadataResponse.TensorMetadata(**t) for t in doc["outputs"]]
        return pb.ModelMetadataResponse(**doc)

    async def ModelInfer(self, request: pb.ModelInferRequest,
                         context: grpc.aio.ServicerContext) -> pb.ModelInferResponse:
        t0 = time.perf_counter_ns()
        server = self.server
        if not server.authorized(dict(context.invocation_metadata() or ()).get("authorization")):
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "bad token")
        fault = server.tick()
        if fault == "fail":
            await context.abort(grpc.StatusCode[server.behaviour.fail_code], "injected")
        try:
            t = request.inputs[0]
            x = p.tensor_from_raw(t.name, t.datatype, t.shape, request.raw_input_contents[0]) \
                if request.raw_input_contents else p.tensor_from_contents(
                    t.name, t.datatype, t.shape, getattr(t.contents, p.contents_field(t.datatype)))
        except (IndexError, p.ProtocolError) as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        resp = await server.compute(fault, x, t0)
        out = pb.ModelInferResponse(model_name=MODEL, model_version="1")
        out.outputs.add(name="y", datatype=x.datatype, shape=x.shape)
        out.raw_output_contents.append(p.tensor_to_raw(x))
        resp.parameters[p.SERVER_TOTAL_NS] = time.perf_counter_ns() - t0
        for key, value in resp.parameters.items():
            setattr(out.parameters[key], p.parameter_field(value), value)
        return out


@contextlib.contextmanager
def spawn(**behaviour: Any) -> Iterator[Echo]:
    """Run the server in a child process (`Behaviour` fields as keywords); killed on exit."""
    args = [f"--{k.replace('_', '-')}={v}" for k, v in behaviour.items()]
    proc = subprocess.Popen([sys.executable, "-m", "tests.oipwire.oip_echo", *args],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline() if ready else ""
        if not line:
            raise RuntimeError(f"oip_echo did not start in {START_TIMEOUT_S} s")
        ports = json.loads(line)
        yield Echo(proc, ports["http"], ports["grpc"])
    finally:
        proc.kill()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


async def _serve(behaviour: Behaviour) -> None:
    server = EchoServer(behaviour)
    http_port, grpc_port = await server.start()
    print(json.dumps({"http": http_port, "grpc": grpc_port}), flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> None:
    """Serve until killed; flags are `Behaviour` fields (`--sleep-ms 1`)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for f in fields(Behaviour):
        parser.add_argument("--" + f.name.replace("_", "-"), type=type(f.default),
                            default=f.default)
    behaviour = Behaviour(**vars(parser.parse_args(argv)))
    try:
        import uvloop
        uvloop.run(_serve(behaviour))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
