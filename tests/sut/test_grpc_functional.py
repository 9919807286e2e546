"""The gRPC server over a loopback socket: every RPC, raw and typed tensor contents."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import numpy as np
import pytest
import torch

import oipwire as p
from oipwire.proto import grpc_predict_v2_pb2 as pb
from oipwire.proto import grpc_predict_v2_pb2_grpc as pb_grpc
from sut.models import load_model
from sut.server.core import ServerConfig
from sut.server.thread import ServerThread
from sut.service import build_service

pytestmark = pytest.mark.functional


@pytest.fixture(scope="module")
def channel() -> Iterator[grpc.Channel]:
    service = build_service("mlp", {"max_batch_size": "8", "warmup": "1"})
    with ServerThread(service, ServerConfig(http_port=0, grpc_port=0)) as running, \
            grpc.insecure_channel(running.grpc_target) as opened:
        yield opened


@pytest.fixture(scope="module")
def stub(channel: grpc.Channel) -> pb_grpc.GRPCInferenceServiceStub:
    return pb_grpc.GRPCInferenceServiceStub(channel)


def direct(x: np.ndarray) -> np.ndarray:
    module = load_model("mlp", {}, 0).module
    with torch.no_grad():
        out: np.ndarray = module(torch.from_numpy(x.copy())).numpy()
    return out


def inputs(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 256)).astype(np.float32)


def request(x: np.ndarray, typed: bool = False, name: str = "input",
            datatype: str = "FP32") -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name="mlp", id="r1")
    tensor = msg.inputs.add(name=name, datatype=datatype, shape=x.shape)
    if typed:
        tensor.contents.fp32_contents.extend(x.ravel().tolist())
    else:
        msg.raw_input_contents.append(x.tobytes())
    return msg


def code_of(call: grpc.RpcError) -> grpc.StatusCode:
    code: grpc.StatusCode = call.code()
    return code


def test_health_and_metadata(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    assert stub.ServerLive(pb.ServerLiveRequest()).live
    assert stub.ServerReady(pb.ServerReadyRequest()).ready
    assert stub.ModelReady(pb.ModelReadyRequest(name="mlp")).ready
    assert stub.ModelReady(pb.ModelReadyRequest(name="mlp", version="1")).ready
    meta = stub.ServerMetadata(pb.ServerMetadataRequest())
    assert meta.name == "loadgen-sut" and p.EXTENSION_BINARY_TENSOR_DATA in meta.extensions
    model = stub.ModelMetadata(pb.ModelMetadataRequest(name="mlp"))
    assert (model.name, list(model.versions), model.platform) == ("mlp", ["1"], "pytorch")
    assert [(t.name, t.datatype, list(t.shape)) for t in model.inputs] == [
        ("input", "FP32", [-1, 256])]
    assert [(t.name, t.datatype, list(t.shape)) for t in model.outputs] == [
        ("output", "FP32", [-1, 10])]


@pytest.mark.parametrize("rpc", ["ModelReady", "ModelMetadata"])
@pytest.mark.parametrize(("name", "version"), [("nope", ""), ("mlp", "2")])
def test_unknown_model_or_version_is_not_found(stub: pb_grpc.GRPCInferenceServiceStub, rpc: str,
                                               name: str, version: str) -> None:
    kind = pb.ModelReadyRequest if rpc == "ModelReady" else pb.ModelMetadataRequest
    with pytest.raises(grpc.RpcError) as err:
        getattr(stub, rpc)(kind(name=name, version=version))
    assert code_of(err.value) is grpc.StatusCode.NOT_FOUND
    assert name in str(err.value.details())


def test_raw_contents_equal_a_direct_call(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = inputs(4)
    resp = stub.ModelInfer(request(x))
    assert (resp.model_name, resp.model_version, resp.id) == ("mlp", "1", "r1")
    (out,) = resp.outputs
    assert (out.name, out.datatype, list(out.shape)) == ("output", "FP32", [4, 10])
    assert not out.HasField("contents") and len(resp.raw_output_contents) == 1
    got = np.frombuffer(resp.raw_output_contents[0], dtype="<f4").reshape(4, 10)
    np.testing.assert_allclose(got, direct(x), rtol=1e-5, atol=1e-6)


def test_typed_contents_come_back_typed(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    x = inputs(2, seed=1)
    resp = stub.ModelInfer(request(x, typed=True))
    assert not resp.raw_output_contents
    got = np.array(resp.outputs[0].contents.fp32_contents, dtype=np.float32).reshape(2, 10)
    np.testing.assert_allclose(got, direct(x), rtol=1e-5, atol=1e-6)


def test_timings_and_requested_outputs(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    msg = request(inputs(1))
    msg.outputs.add(name="output")
    msg.parameters["priority"].int64_param = 1
    resp = stub.ModelInfer(msg, timeout=10)
    params = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in resp.parameters.items()}
    assert set(params) == set(p.TIMING_PARAMETERS)
    assert params[p.BATCH_SIZE] >= 1 and params[p.SERVER_TOTAL_NS] >= params[p.COMPUTE_NS]
    assert [o.name for o in resp.outputs] == ["output"]


def bad_requests() -> list[tuple[str, pb.ModelInferRequest, str]]:
    cases = [("datatype", request(inputs(1).astype(np.float64), datatype="FP64"),
              "datatype FP64"),
             ("shape", request(inputs(1)[:, :255]), "shape [1, 255]"),
             ("name", request(inputs(1), name="x"), "takes inputs"),
             ("rows", request(inputs(9)), "max_batch_size")]
    short = request(inputs(1))
    short.raw_input_contents[0] = short.raw_input_contents[0][:-4]
    cases.append(("bytes", short, "needs 1024"))
    extra = request(inputs(1))
    extra.raw_input_contents.append(b"")
    cases.append(("raw count", extra, "2 raw_input_contents for 1 inputs"))
    both = request(inputs(1))
    both.inputs[0].contents.fp32_contents.append(1.0)
    cases.append(("both", both, "both contents"))
    few = request(inputs(1), typed=True)
    del few.inputs[0].contents.fp32_contents[-1]
    cases.append(("count", few, "255 values"))
    unknown = request(inputs(1))
    unknown.outputs.add(name="logits")
    cases.append(("output", unknown, "unknown outputs"))
    empty = request(inputs(1))
    empty.parameters["priority"].CopyFrom(pb.InferParameter())
    cases.append(("parameter", empty, "has no value"))
    return cases


@pytest.mark.parametrize(("what", "msg", "words"), bad_requests(), ids=lambda c: str(c)[:12])
def test_invalid_requests_get_invalid_argument(stub: pb_grpc.GRPCInferenceServiceStub, what: str,
                                               msg: pb.ModelInferRequest, words: str) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(msg)
    assert code_of(err.value) is grpc.StatusCode.INVALID_ARGUMENT, what
    assert words in str(err.value.details()), what
    assert stub.ModelInfer(request(inputs(1))).outputs


def test_unknown_model_infer_is_not_found(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    msg = request(inputs(1))
    msg.model_name = "resnet"
    with pytest.raises(grpc.RpcError) as err:
        stub.ModelInfer(msg)
    assert code_of(err.value) is grpc.StatusCode.NOT_FOUND


def test_bytes_that_are_not_protobuf_get_invalid_argument(channel: grpc.Channel) -> None:
    raw = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                              request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.RpcError) as err:
        raw(b"\xff\xff\xff\xff")
    assert code_of(err.value) is grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed ModelInferRequest" in str(err.value.details())
