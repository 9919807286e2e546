"""KServe's own `ModelServer` serving model `sum` (FP32 [-1, 4] -> row sums [-1, 1]), on loopback.

Run with an interpreter that has `kserve` installed, in its own virtualenv: KServe registers
the proto package `inference`, as `oipwire` does, so the two cannot share a process. It
imports nothing from this repository.

    KSERVE_PY sum_server.py --http_port P --grpc_port Q [--lifetime-s 120]

KServe binds 0.0.0.0 and [::]; `loopback_only` rebinds both to 127.0.0.1. Binary outputs
follow the request (`use_binary_outputs`): KServe then answers chunked, with a lower-case
`inference-header-content-length` and no Content-Type. The response id is "" when the
request has none (KServe's `InferResponse` refuses None: a model written as
`response_id=payload.id` answers 500 to every client that sends no id, loadgen included).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

import numpy as np
from kserve import (  # type: ignore[import-not-found]
    InferOutput,
    InferRequest,
    InferResponse,
    Model,
    ModelServer,
)

__all__ = ["Sum", "loopback_only", "main"]


class Sum(Model):  # type: ignore[misc]
    """Row sums of x."""

    def __init__(self) -> None:
        super().__init__("sum")
        self.ready = True

    async def get_input_types(self) -> Any:
        return [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}]

    async def get_output_types(self) -> Any:
        return [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}]

    async def predict(self, payload: InferRequest, headers: Any = None,
                      response_headers: Any = None) -> InferResponse:
        x = payload.inputs[0].as_numpy()
        y = x.sum(axis=1, keepdims=True).astype(np.float32)
        binary = payload.use_binary_outputs
        out = InferOutput(name="y", shape=list(y.shape), datatype="FP32")
        out.set_data_from_numpy(y, binary_data=binary)
        return InferResponse(model_name="sum", infer_outputs=[out], response_id=payload.id or "",
                             use_binary_outputs=binary, from_grpc=payload.from_grpc)


def loopback_only() -> None:
    """KServe binds 0.0.0.0 and [::]; keep this run on loopback."""
    import grpc  # type: ignore[import-untyped]
    import uvicorn

    init = uvicorn.Config.__init__

    def config(self: Any, *a: Any, **kw: Any) -> None:
        kw["host"] = "127.0.0.1"
        init(self, *a, **kw)

    uvicorn.Config.__init__ = config  # type: ignore[method-assign]
    make = grpc.aio.server

    def server(*a: Any, **kw: Any) -> Any:
        srv = make(*a, **kw)
        add = srv.add_insecure_port
        srv.add_insecure_port = lambda addr: add(addr.replace("[::]", "127.0.0.1"))
        return srv

    grpc.aio.server = server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lifetime-s", type=float, default=120.0)
    args, rest = parser.parse_known_args()
    sys.argv = [sys.argv[0], *rest]  # the rest is KServe's: --http_port, --grpc_port
    timer = threading.Timer(args.lifetime_s, lambda: os.kill(os.getpid(), signal.SIGTERM))
    timer.daemon = True
    timer.start()
    loopback_only()
    ModelServer().start([Sum()])


if __name__ == "__main__":
    main()
