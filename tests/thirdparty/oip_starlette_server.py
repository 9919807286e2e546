"""An Open Inference Protocol server on a stack we did not write: Starlette on uvicorn (h11).

Written from the protocol text, not from `oipwire` (it imports neither `oipwire` nor
`loadgen`), and shaped like KServe's Python `ModelServer`, whose answers broke the client:

* model `sum`: input `x` FP32 [-1, 4], output `y` FP32 [-1, 1], the sum of each row;
* a request with binary data is answered *chunked* (a `StreamingResponse`: the JSON header
  and the tensor bytes in separate chunks), with a lower-case
  `inference-header-content-length` and no Content-Type; a JSON request gets JSON;
* metadata carries `"versions": null` and `"parameters": null`; outputs carry
  `"parameters": null` when JSON;
* versioned URLs answer 501 and errors are FastAPI-shaped `{"detail": ...}`.

    python -m tests.thirdparty.oip_starlette_server [--lifetime-s 120]

binds 127.0.0.1 on a free port, prints `port=N` on one line, and serves until killed or
until `--lifetime-s` has passed.
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["MODEL", "app", "main"]

MODEL = "sum"
HEADER = "inference-header-content-length"
METADATA = {"name": MODEL, "versions": None, "platform": "starlette", "parameters": None,
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4], "parameters": None}],
            "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1], "parameters": None}]}


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status)


def _model(request: Request) -> JSONResponse | None:
    name = request.path_params["model"]
    return None if name == MODEL else _error(404, f"Model with name {name} does not exist.")


async def ready(request: Request) -> JSONResponse:
    return JSONResponse({"ready": True})


async def metadata(request: Request) -> JSONResponse:
    return _model(request) or JSONResponse(METADATA)


async def model_ready(request: Request) -> JSONResponse:
    return _model(request) or JSONResponse({"name": MODEL, "ready": True})


async def versioned(request: Request) -> JSONResponse:
    return _error(501, "Model versioning is not supported yet.")


async def infer(request: Request) -> Response:
    missing = _model(request)
    if missing is not None:
        return missing
    body = await request.body()
    length = int(request.headers.get(HEADER, len(body)))
    try:
        doc = json.loads(body[:length])
        [x] = doc["inputs"]
        rows, cols = x["shape"]
        if x["datatype"] != "FP32" or x["name"] != "x" or cols != 4:
            raise ValueError("input x must be FP32 [-1, 4]")
        values = (struct.unpack(f"<{rows * cols}f", body[length:]) if length < len(body)
                  else x["data"])
    except (ValueError, KeyError, TypeError, struct.error) as exc:
        return _error(422, f"bad request: {exc}")
    sums = [sum(values[r * cols:(r + 1) * cols]) for r in range(rows)]
    binary = bool((doc.get("parameters") or {}).get("binary_data_output"))
    out: dict[str, Any] = {"name": "y", "datatype": "FP32", "shape": [rows, 1]}
    answer: dict[str, Any] = {"model_name": MODEL, "model_version": None, "id": doc.get("id"),
                              "parameters": None, "outputs": [out]}
    if not binary:
        out |= {"parameters": None, "data": sums}
        return JSONResponse(answer)
    raw = struct.pack(f"<{rows}f", *sums)
    out["parameters"] = {"binary_data_size": len(raw)}
    head = json.dumps(answer).encode()

    async def chunks() -> AsyncIterator[bytes]:
        yield head
        yield raw

    return StreamingResponse(chunks(), headers={HEADER: str(len(head))}, media_type=None)


app = Starlette(routes=[
    Route("/v2/health/ready", ready),
    Route("/v2/health/live", ready),
    Route("/v2/models/{model}", metadata),
    Route("/v2/models/{model}/ready", model_ready),
    Route("/v2/models/{model}/infer", infer, methods=["POST"]),
    Route("/v2/models/{model}/versions/{version}", versioned),
    Route("/v2/models/{model}/versions/{version}/{rest:path}", versioned, methods=["GET", "POST"]),
])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lifetime-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted ones inherit it:
    # uvicorn leaves it off on a socket it is handed, and each answer (head, then body) then
    # waits ~40 ms for the client's delayed ACK
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)  # connections wait in the backlog until uvicorn has started
    server = uvicorn.Server(uvicorn.Config(app, http="h11", loop="asyncio", log_level="warning",
                                           lifespan="off", access_log=False))
    timer = threading.Timer(args.lifetime_s, lambda: setattr(server, "should_exit", True))
    timer.daemon = True
    timer.start()
    print(f"port={sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])
    sys.exit(0)


if __name__ == "__main__":
    main()
