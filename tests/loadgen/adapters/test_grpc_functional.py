"""The gRPC OIP adapter: its spec, and answers in typed `contents`; both remote adapters
against the real `loadgen serve --model mlp`. The scenarios it shares with HTTP against the
loopback echo server: test_oip_functional."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest

from loadgen.adapters.base import SystemUnderTest
from loadgen.adapters.grpc import GrpcSut
from loadgen.adapters.http import HttpSut
from loadgen.adapters.registry import make_sut
from loadgen.api import run_async, run_loop
from loadgen.errors import SutSpecError
from loadgen.plan.settings import load_settings
from oipwire.proto import grpc_predict_v2_pb2 as pb
from oipwire.proto import grpc_predict_v2_pb2_grpc as pb_grpc
from tests.fairness import skip_if_host_unfair
from tests.loadgen.adapters.oiprun import COMPONENTS, OFFLINE, SERVER, as_dict, run
from tests.served import serve


def test_spec_and_options() -> None:
    sut = make_sut("grpc://h/m?connections=2&max_in_flight=16&timeout_ms=50&binary=0&token=zz9")
    assert isinstance(sut, GrpcSut)
    info = sut.describe()
    assert (info["connections"], info["max_in_flight"], info["timeout_ms"]) == (2, 16, 50)
    assert (info["protocol"], info["endpoint"], info["binary"], info["tls"]) == (
        "grpc", "grpc://h:8001/m", False, False)
    assert "zz9" not in str(info)
    assert make_sut("grpcs://h:1/m").describe()["tls"] is True
    for spec, word in [("grpc://h:1/m?bogus=1", "bogus"), ("grpcs://h:1/m?insecure=1", "ca=FILE"),
                       ("grpc://h:1/m?max_in_flight=0", "at least"),
                       ("grpcs://h:1/m?ca=/no/such/file", "ca")]:
        with pytest.raises(SutSpecError, match=word):
            make_sut(spec)


@pytest.mark.serial  # VALID runs on a real server; skips on a loaded host
@pytest.mark.functional
def test_real_server_over_http_and_grpc_functional() -> None:
    with serve("mlp") as server:
        suts: tuple[SystemUnderTest, ...] = (HttpSut.from_spec(f"http://{server.http}/mlp"),
                                             GrpcSut.from_spec(f"grpc://{server.grpc}/mlp"))
        for sut in suts:
            result = run(sut, [*SERVER, "target_qps=300", "target_latency_ms=200", "warmup_s=1",
                               "min_duration_s=1.6", "min_query_count=460"])
            skip_if_host_unfair(result)
            assert result["valid"], (sut.name, result["reasons"], result["errors_by_kind"])
            assert COMPONENTS <= set(result["components_ns"]) and result["batch_sizes"]


class _TypedServicer(pb_grpc.GRPCInferenceServiceServicer):  # type: ignore[misc]
    """As Triton and KServe may answer: outputs in typed `contents`, no raw bytes; metadata
    with no versions; timings as parameters."""

    async def ServerReady(self, request: Any, context: Any) -> Any:
        return pb.ServerReadyResponse(ready=True)

    async def ModelReady(self, request: Any, context: Any) -> Any:
        return pb.ModelReadyResponse(ready=True)

    async def ModelMetadata(self, request: Any, context: Any) -> Any:
        return pb.ModelMetadataResponse(name="sum", platform="typed", inputs=[
            pb.ModelMetadataResponse.TensorMetadata(name="x", datatype="FP32", shape=[-1, 4])])

    async def ModelInfer(self, request: Any, context: Any) -> Any:
        rows = request.inputs[0].shape[0]
        reply = pb.ModelInferResponse(model_name="sum")
        reply.outputs.add(name="y", datatype="FP32", shape=[rows, 1]).contents.fp32_contents.extend(
            [1.0] * rows)
        reply.parameters["server_total_ns"].int64_param = 1000
        return reply


@pytest.mark.functional
def test_answers_in_typed_contents_functional() -> None:
    async def scenario() -> dict[str, Any]:
        server = grpc.aio.server()
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(_TypedServicer(), server)
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            result = await run_async(load_settings(None, OFFLINE),
                                     GrpcSut.from_spec(f"grpc://127.0.0.1:{port}/sum"))
        finally:
            await server.stop(None)
        return as_dict(result)

    result = run_loop(asyncio.wait_for(scenario(), 60))
    assert result["errors"] == 0 and result["unfinished"] == 0 and result["samples"] == 11000
    assert "server_total" in result["components_ns"]
