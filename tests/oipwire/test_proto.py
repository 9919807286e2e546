"""Tests for oipwire.proto: stubs are fresh; names and field numbers follow the spec."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from google.protobuf.descriptor import FieldDescriptor

import oipwire as p
from oipwire import proto as oip_proto
from oipwire.proto import grpc_predict_v2_pb2 as pb
from oipwire.proto import grpc_predict_v2_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[2]
GENERATED = ["grpc_predict_v2_pb2.py", "grpc_predict_v2_pb2.pyi", "grpc_predict_v2_pb2_grpc.py"]


def test_committed_stubs_match_regeneration(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    subprocess.run(["bash", str(ROOT / "scripts" / "gen_proto.sh"), str(tmp_path)], check=True,
                   env=env)
    for name in GENERATED:
        fresh = (tmp_path / "oipwire" / "proto" / name).read_bytes()
        assert fresh == (ROOT / "oipwire" / "proto" / name).read_bytes(), (
            f"{name} is stale: run scripts/gen_proto.sh")
    assert b"from oipwire.proto import grpc_predict_v2_pb2" in (
        ROOT / "oipwire" / "proto" / "grpc_predict_v2_pb2_grpc.py").read_bytes()


def test_service_and_methods() -> None:
    service = pb.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert service.full_name == oip_proto.SERVICE_NAME == "inference.GRPCInferenceService"
    methods = {m.name: (m.input_type.name, m.output_type.name) for m in service.methods}
    assert methods == {name: (f"{name}Request", f"{name}Response") for name in (
        "ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata", "ModelInfer",
        "ModelConfig", "ModelStatistics", "RepositoryIndex")} | {
        "ModelStreamInfer": ("ModelInferRequest", "ModelStreamInferResponse")}
    stream = service.methods_by_name["ModelStreamInfer"]
    assert stream.client_streaming and stream.server_streaming
    assert all(hasattr(pb_grpc, n) for n in ("GRPCInferenceServiceStub",
               "GRPCInferenceServiceServicer", "add_GRPCInferenceServiceServicer_to_server"))
    assert oip_proto.PROTO_PATH.is_file() and pb.DESCRIPTOR.package == "inference"


REPEATED, OPTIONAL = True, False
FIELDS = {  # message: {field: (number, type, repeated)} as in the spec and Triton
    "ModelInferRequest": {
        "model_name": (1, "string", OPTIONAL), "model_version": (2, "string", OPTIONAL),
        "id": (3, "string", OPTIONAL), "parameters": (4, "message", REPEATED),
        "inputs": (5, "message", REPEATED), "outputs": (6, "message", REPEATED),
        "raw_input_contents": (7, "bytes", REPEATED)},
    "ModelInferRequest.InferInputTensor": {
        "name": (1, "string", OPTIONAL), "datatype": (2, "string", OPTIONAL),
        "shape": (3, "int64", REPEATED), "parameters": (4, "message", REPEATED),
        "contents": (5, "message", OPTIONAL)},
    "ModelInferRequest.InferRequestedOutputTensor": {
        "name": (1, "string", OPTIONAL), "parameters": (2, "message", REPEATED)},
    "ModelInferResponse": {
        "model_name": (1, "string", OPTIONAL), "model_version": (2, "string", OPTIONAL),
        "id": (3, "string", OPTIONAL), "parameters": (4, "message", REPEATED),
        "outputs": (5, "message", REPEATED), "raw_output_contents": (6, "bytes", REPEATED)},
    "ModelInferResponse.InferOutputTensor": {
        "name": (1, "string", OPTIONAL), "datatype": (2, "string", OPTIONAL),
        "shape": (3, "int64", REPEATED), "parameters": (4, "message", REPEATED),
        "contents": (5, "message", OPTIONAL)},
    "InferParameter": {
        "bool_param": (1, "bool", OPTIONAL), "int64_param": (2, "int64", OPTIONAL),
        "string_param": (3, "string", OPTIONAL), "double_param": (4, "double", OPTIONAL),
        "uint64_param": (5, "uint64", OPTIONAL)},
    "InferTensorContents": {
        "bool_contents": (1, "bool", REPEATED), "int_contents": (2, "int32", REPEATED),
        "int64_contents": (3, "int64", REPEATED), "uint_contents": (4, "uint32", REPEATED),
        "uint64_contents": (5, "uint64", REPEATED), "fp32_contents": (6, "float", REPEATED),
        "fp64_contents": (7, "double", REPEATED), "bytes_contents": (8, "bytes", REPEATED)},
    "ModelMetadataResponse": {
        "name": (1, "string", OPTIONAL), "versions": (2, "string", REPEATED),
        "platform": (3, "string", OPTIONAL), "inputs": (4, "message", REPEATED),
        "outputs": (5, "message", REPEATED)},
    "ModelMetadataResponse.TensorMetadata": {
        "name": (1, "string", OPTIONAL), "datatype": (2, "string", OPTIONAL),
        "shape": (3, "int64", REPEATED)},
    "ServerMetadataResponse": {
        "name": (1, "string", OPTIONAL), "version": (2, "string", OPTIONAL),
        "extensions": (3, "string", REPEATED)},
    "ModelReadyRequest": {"name": (1, "string", OPTIONAL), "version": (2, "string", OPTIONAL)},
    "ModelMetadataRequest": {"name": (1, "string", OPTIONAL), "version": (2, "string", OPTIONAL)},
    "ServerLiveResponse": {"live": (1, "bool", OPTIONAL)},
    "ServerReadyResponse": {"ready": (1, "bool", OPTIONAL)},
    "ModelReadyResponse": {"ready": (1, "bool", OPTIONAL)},
    "ServerLiveRequest": {}, "ServerReadyRequest": {}, "ServerMetadataRequest": {},
    # Triton's extensions (grpc_service.proto, model_config.proto), a subset
    "ModelStreamInferResponse": {
        "error_message": (1, "string", OPTIONAL), "infer_response": (2, "message", OPTIONAL)},
    "ModelConfigRequest": {"name": (1, "string", OPTIONAL), "version": (2, "string", OPTIONAL)},
    "ModelConfigResponse": {"config": (1, "message", OPTIONAL)},
    "ModelConfig": {
        "name": (1, "string", OPTIONAL), "platform": (2, "string", OPTIONAL),
        "max_batch_size": (4, "int32", OPTIONAL), "input": (5, "message", REPEATED),
        "output": (6, "message", REPEATED), "instance_group": (7, "message", REPEATED),
        "dynamic_batching": (11, "message", OPTIONAL), "backend": (17, "string", OPTIONAL)},
    "ModelInput": {
        "name": (1, "string", OPTIONAL), "data_type": (2, "enum", OPTIONAL),
        "format": (3, "enum", OPTIONAL), "dims": (4, "int64", REPEATED)},
    "ModelOutput": {
        "name": (1, "string", OPTIONAL), "data_type": (2, "enum", OPTIONAL),
        "dims": (3, "int64", REPEATED)},
    "ModelDynamicBatching": {
        "preferred_batch_size": (1, "int32", REPEATED),
        "max_queue_delay_microseconds": (2, "uint64", OPTIONAL),
        "preserve_ordering": (3, "bool", OPTIONAL), "priority_levels": (4, "uint64", OPTIONAL),
        "default_priority_level": (5, "uint64", OPTIONAL)},
    "ModelInstanceGroup": {
        "name": (1, "string", OPTIONAL), "count": (2, "int32", OPTIONAL),
        "gpus": (3, "int32", REPEATED), "kind": (4, "enum", OPTIONAL)},
    "ModelStatisticsRequest": {
        "name": (1, "string", OPTIONAL), "version": (2, "string", OPTIONAL)},
    "ModelStatisticsResponse": {"model_stats": (1, "message", REPEATED)},
    "ModelStatistics": {
        "name": (1, "string", OPTIONAL), "version": (2, "string", OPTIONAL),
        "last_inference": (3, "uint64", OPTIONAL), "inference_count": (4, "uint64", OPTIONAL),
        "execution_count": (5, "uint64", OPTIONAL), "inference_stats": (6, "message", OPTIONAL),
        "batch_stats": (7, "message", REPEATED)},
    "InferStatistics": {name: (number, "message", OPTIONAL) for number, name in enumerate((
        "success", "fail", "queue", "compute_input", "compute_infer", "compute_output",
        "cache_hit", "cache_miss"), start=1)},
    "InferBatchStatistics": {
        "batch_size": (1, "uint64", OPTIONAL), "compute_input": (2, "message", OPTIONAL),
        "compute_infer": (3, "message", OPTIONAL), "compute_output": (4, "message", OPTIONAL)},
    "StatisticDuration": {"count": (1, "uint64", OPTIONAL), "ns": (2, "uint64", OPTIONAL)},
    "RepositoryIndexRequest": {
        "repository_name": (1, "string", OPTIONAL), "ready": (2, "bool", OPTIONAL)},
    "RepositoryIndexResponse": {"models": (1, "message", REPEATED)},
    "RepositoryIndexResponse.ModelIndex": {
        "name": (1, "string", OPTIONAL), "version": (2, "string", OPTIONAL),
        "state": (3, "string", OPTIONAL), "reason": (4, "string", OPTIONAL)},
}
TRITON_ENUMS = {  # enum: values as in Triton's model_config.proto
    "DataType": ["TYPE_INVALID", "TYPE_BOOL", "TYPE_UINT8", "TYPE_UINT16", "TYPE_UINT32",
                 "TYPE_UINT64", "TYPE_INT8", "TYPE_INT16", "TYPE_INT32", "TYPE_INT64",
                 "TYPE_FP16", "TYPE_FP32", "TYPE_FP64", "TYPE_STRING", "TYPE_BF16"],
    "ModelInstanceGroup.Kind": ["KIND_AUTO", "KIND_GPU", "KIND_CPU", "KIND_MODEL"],
    "ModelInput.Format": ["FORMAT_NONE", "FORMAT_NHWC", "FORMAT_NCHW"],
}
TYPE_NAMES = {v: k[len("TYPE_"):].lower() for k, v in vars(FieldDescriptor).items()
              if k.startswith("TYPE_")}


@pytest.mark.parametrize("message", sorted(FIELDS))
def test_field_numbers_and_types(message: str) -> None:
    descriptor = pb.DESCRIPTOR.message_types_by_name[message.split(".")[0]]
    for nested in message.split(".")[1:]:
        descriptor = descriptor.nested_types_by_name[nested]
    got = {f.name: (f.number, TYPE_NAMES[f.type], f.is_repeated)
           for f in descriptor.fields}
    assert got == FIELDS[message]


@pytest.mark.parametrize("enum", sorted(TRITON_ENUMS))
def test_triton_enum_numbers(enum: str) -> None:
    outer, _, inner = enum.partition(".")
    descriptor = (pb.DESCRIPTOR.message_types_by_name[outer].enum_types_by_name[inner] if inner
                  else pb.DESCRIPTOR.enum_types_by_name[outer])
    assert [(v.name, v.number) for v in descriptor.values] == [
        (name, number) for number, name in enumerate(TRITON_ENUMS[enum])]
    dynamic = pb.ModelConfig.DESCRIPTOR.fields_by_name["dynamic_batching"]
    assert dynamic.containing_oneof.name == "scheduling_choice"


def test_parameter_oneof_and_wire_bytes() -> None:
    oneof = pb.InferParameter.DESCRIPTOR.oneofs_by_name["parameter_choice"]
    assert [f.name for f in oneof.fields] == list(FIELDS["InferParameter"])
    # Field 7, length-delimited: tag byte (7 << 3) | 2 == 0x3a, as any standard client sends.
    assert pb.ModelInferRequest(raw_input_contents=[b"ab"]).SerializeToString() == b"\x3a\x02ab"
    assert pb.ModelInferResponse(raw_output_contents=[b"c"]).SerializeToString() == b"\x32\x01c"


def test_codec_wiring_roundtrip() -> None:
    """The wiring a gRPC client and server do around oipwire, in a few lines."""
    x = p.InferTensor.from_numpy("x", np.arange(6, dtype=np.float16).reshape(2, 3))
    s = p.InferTensor.from_numpy("s", np.array([b"a", b"\xff"], dtype=object))
    msg = pb.ModelInferRequest(model_name="m", id="7")
    for key, value in {"u": 2**64 - 1, p.BINARY_DATA_OUTPUT: True, "r": 0.5}.items():
        setattr(msg.parameters[key], p.parameter_field(value), value)
    for tensor in (x, s):
        msg.inputs.add(name=tensor.name, datatype=tensor.datatype, shape=tensor.shape)
        msg.raw_input_contents.append(p.tensor_to_raw(tensor))
    wire = pb.ModelInferRequest.FromString(msg.SerializeToString())
    params = {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in wire.parameters.items()}
    assert params == {"u": 2**64 - 1, p.BINARY_DATA_OUTPUT: True, "r": 0.5}
    assert [p.tensor_from_raw(t.name, t.datatype, t.shape, r)
            for t, r in zip(wire.inputs, wire.raw_input_contents, strict=True)] == [x, s]

    typed = pb.ModelInferRequest()  # the other form: typed contents, no raw_input_contents
    field, values = p.tensor_to_contents(s)
    getattr(typed.inputs.add(name="s", datatype="BYTES", shape=[2]).contents, field).extend(values)
    (t,) = pb.ModelInferRequest.FromString(typed.SerializeToString()).inputs
    values = getattr(t.contents, p.contents_field(t.datatype))
    assert p.tensor_from_contents(t.name, t.datatype, t.shape, values) == s
    meta = pb.ModelMetadataResponse(**p.model_metadata("m", ["1"], "pytorch",
                                                       [("x", "FP16", [-1, 3])], []))
    assert meta.inputs[0].shape == [-1, 3]
    assert pb.ServerMetadataResponse(**p.server_metadata("sut", "1")).extensions == [
        p.EXTENSION_BINARY_TENSOR_DATA]
