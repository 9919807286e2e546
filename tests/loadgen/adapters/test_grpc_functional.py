"""The gRPC OIP adapter end to end through the engine, against the loopback echo server;
and both remote adapters against the real `loadgen serve --model mlp`."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest

from loadgen.adapters.base import SystemUnderTest
from loadgen.adapters.grpc import GrpcSut
from loadgen.adapters.http import HttpSut
from loadgen.adapters.registry import make_sut
from loadgen.api import run_async, run_loop
from loadgen.errors import SutError, SutSpecError
from loadgen.plan.settings import load_settings
from oipwire.proto import grpc_predict_v2_pb2 as pb
from oipwire.proto import grpc_predict_v2_pb2_grpc as pb_grpc
from tests.fairness import skip_if_host_busy, skip_if_host_unfair
from tests.loadgen.adapters.test_http_functional import COMPONENTS, OFFLINE, SERVER, as_dict, run
from tests.oipwire.oip_echo import spawn
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


@pytest.fixture(scope="module")
def echo() -> Any:
    with spawn(sleep_ms=1) as server:
        yield server


@pytest.mark.functional
def test_server_scenario_valid_with_components_functional(echo: Any) -> None:
    result = run(GrpcSut.from_spec(echo.grpc()), SERVER)
    skip_if_host_unfair(result)
    assert result["valid"], result["reasons"]
    assert COMPONENTS <= set(result["components_ns"])
    assert result["components_ns"]["compute"]["p50"] >= 900_000
    assert result["sut"]["protocol"] == "grpc" and result["errors"] == 0


@pytest.mark.functional
def test_offline_valid_in_batches_functional(echo: Any) -> None:
    result = run(GrpcSut.from_spec(echo.grpc("max_in_flight=1&batch=8&connections=2")), OFFLINE)
    assert result["valid"], result["reasons"]
    assert result["samples"] == 11000 and set(result["batch_sizes"]) == {"8"}
    assert COMPONENTS <= set(result["components_ns"])


@pytest.mark.functional
def test_typed_contents_token_and_multistream_functional() -> None:
    with spawn(token="s3cret") as server:
        ok = run(GrpcSut.from_spec(server.grpc("binary=0&token=s3cret")),
                 [*SERVER, "scenario='MultiStream'", "min_query_count=50", "min_duration_s=0.3"])
        assert ok["valid"], ok["reasons"]
        assert ok["batch_sizes"] == {"8": ok["queries"]}
        bad = run(GrpcSut.from_spec(server.grpc("token=wrong")), [*SERVER, "min_duration_s=0.3"])
    assert set(bad["errors_by_kind"]) == {"grpc_UNAUTHENTICATED"} and not bad["valid"]


@pytest.mark.functional
@pytest.mark.parametrize("code", ["UNAVAILABLE", "RESOURCE_EXHAUSTED"])
def test_grpc_errors_counted_by_kind_functional(code: str) -> None:
    with spawn(fail_every=4, fail_code=code) as server:
        result = run(GrpcSut.from_spec(server.grpc()), [*SERVER, "warmup_s=0"])
    errors = result["errors_by_kind"]
    assert set(errors) == {f"grpc_{code}"} and not result["valid"]
    assert abs(result["errors"] / (result["queries"] + result["errors"]) - 0.25) < 0.05
    assert result["unfinished"] == 0
    messages = result["errors_detail"][f"grpc_{code}"]["messages"]  # code: details
    assert messages and all(m.startswith(f"{code}: ") for m in messages), messages


@pytest.mark.functional
def test_query_timeout_functional() -> None:
    with spawn(hang_every=20) as server:
        result = run(GrpcSut.from_spec(server.grpc("timeout_ms=100")), SERVER)
    assert set(result["errors_by_kind"]) == {"timeout"} and result["unfinished"] == 0
    if result["queries"] < 200 or result["errors"] > result["queries"] / 10:  # 1 in 20 hangs
        skip_if_host_busy(result, f"{result['errors']} of {result['errors'] + result['queries']}"
                                  " queries unanswered in 100 ms where 1 in 20 hangs")
    assert result["errors"] >= 10 and result["queries"] >= 200  # min_query_count: the run waits


@pytest.mark.functional
def test_server_killed_mid_run_functional() -> None:
    with spawn(sleep_ms=1) as server:
        started = time.monotonic()
        result = run(GrpcSut.from_spec(server.grpc()), [*SERVER, "min_duration_s=1.5"],
                     during=server.proc.kill)
        elapsed = time.monotonic() - started
    assert not result["valid"] and result["unfinished"] == 0 and elapsed < 9
    assert set(result["errors_by_kind"]) == {"grpc_UNAVAILABLE"}
    assert result["queries"] >= 20 and result["errors"] >= 100  # killed after 20 answers


@pytest.mark.functional
def test_start_fails_cleanly_functional() -> None:
    async def start(spec: str) -> None:
        await GrpcSut.from_spec(spec).start(None, None)  # type: ignore[arg-type]

    with spawn() as server:
        with pytest.raises(SutError, match="not ready"):
            run_loop(start(server.grpc().replace("/echo", "/nope")))
        spec = server.grpc()
    with pytest.raises(SutError, match="UNAVAILABLE"):
        run_loop(start(spec))


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
