"""Triton's extensions on our server, over loopback: config, statistics, repository index
(HTTP and gRPC) and ModelStreamInfer; the new HTTP endpoints fuzzed with malformed input."""

from __future__ import annotations

import http.client
import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import grpc
import numpy as np
import pytest
from google.protobuf import json_format  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oipwire.proto import grpc_predict_v2_pb2 as pb
from oipwire.proto import grpc_predict_v2_pb2_grpc as pb_grpc
from sut.server import triton
from sut.server.core import ServerConfig
from sut.server.thread import ServerThread
from sut.service import build_service

pytestmark = pytest.mark.functional

KNOBS = {"max_batch_size": "8", "max_queue_delay_us": "250", "preferred_batch_sizes": "4;8",
         "warmup": "1", "device": "cpu", "instances": "2"}
EXPECTED_CONFIG = {
    "name": "mlp", "max_batch_size": 8,
    "input": [{"name": "input", "data_type": "TYPE_FP32", "dims": [256],
               "format": "FORMAT_NONE"}],
    "dynamic_batching": {"preferred_batch_size": [4, 8], "max_queue_delay_microseconds": 250},
    "instance_group": [{"name": "mlp_0", "kind": "KIND_CPU", "count": 2, "gpus": []}],
}


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    with ServerThread(build_service("mlp", dict(KNOBS)),
                      ServerConfig(http_port=0, grpc_port=0, max_inflight=64)) as running:
        yield running


@pytest.fixture(scope="module")
def stub(server: ServerThread) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    with grpc.insecure_channel(server.grpc_target) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def call(server: ServerThread, method: str, path: str,
         body: bytes | None = None) -> tuple[int, Any]:
    url = urlsplit(server.http_url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        conn.request(method, path, body=body)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def request(rows: int, rid: str, model: str = "mlp") -> pb.ModelInferRequest:
    x = np.random.default_rng(rows).standard_normal((rows, 256)).astype(np.float32)
    msg = pb.ModelInferRequest(model_name=model, id=rid)
    msg.inputs.add(name="input", datatype="FP32", shape=x.shape)
    msg.raw_input_contents.append(x.tobytes())
    return msg


# -- pure documents ------------------------------------------------------------


def test_config_datatypes_and_groups() -> None:
    assert triton.config_datatype("FP32") == "TYPE_FP32"
    assert triton.config_datatype("BYTES") == "TYPE_STRING"
    with pytest.raises(ValueError, match="unknown datatype"):
        triton.config_datatype("FP8")
    groups = triton._instance_groups("m", ["cuda:1", "cuda:0", "cuda:1"])
    assert [(g["kind"], g["count"], g["gpus"]) for g in groups] == [
        ("KIND_GPU", 1, [0]), ("KIND_GPU", 2, [1])]
    assert triton.repository_index("m", ("1",), False, "loading", ready_only=True) == []
    assert triton.repository_index("m", ("1",), False, "loading") == [
        {"name": "m", "version": "1", "state": "UNAVAILABLE", "reason": "loading"}]


# -- HTTP ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v2/models/mlp/config", "/v2/models/mlp/versions/1/config"])
def test_http_config(server: ServerThread, path: str) -> None:
    status, config = call(server, "GET", path)
    assert status == 200
    assert {k: config[k] for k in EXPECTED_CONFIG} == EXPECTED_CONFIG
    assert config["output"][0]["data_type"] == "TYPE_FP32"
    assert -1 not in config["output"][0]["dims"]
    assert config["platform"] and config["backend"]


def test_http_config_errors(server: ServerThread) -> None:
    assert call(server, "GET", "/v2/models/x/config")[0] == 404
    assert call(server, "GET", "/v2/models/mlp/versions/9/config")[0] == 404
    assert call(server, "POST", "/v2/models/mlp/config")[0] == 405


def test_http_repository_index(server: ServerThread) -> None:
    want = [{"name": "mlp", "version": "1", "state": "READY"}]
    assert call(server, "POST", "/v2/repository/index") == (200, want)
    assert call(server, "POST", "/v2/repository/index", b'{"ready": true}') == (200, want)
    assert call(server, "POST", "/v2/repository/index", b"{}") == (200, want)
    for bad in (b"{", b"[1]", b'{"ready": 1}', b"\xff"):
        status, body = call(server, "POST", "/v2/repository/index", bad)
        assert status == 400 and body["error"], bad
    assert call(server, "GET", "/v2/repository/index")[0] == 405


def test_http_stats_without_a_name(server: ServerThread) -> None:
    status, stats = call(server, "GET", "/v2/models/stats")
    assert status == 200 and stats["model_stats"][0]["name"] == "mlp"


FUZZ = settings(max_examples=60, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])
segments = st.sampled_from(["mlp", "x", "", "1", "versions", "config", "..", "%00", "stats",
                            "index", "repository"]) | st.text(max_size=5)


def test_http_fuzz_new_endpoints(server: ServerThread) -> None:
    """Malformed bodies and paths: only declared answers, each a JSON error or document."""
    url = urlsplit(server.http_url)

    @FUZZ
    @given(parts=st.lists(segments, max_size=5), body=st.binary(max_size=64)
           | st.sampled_from([b"null", b'{"ready": null}', b'{"ready": "yes"}', b"[]"]),
           where=st.sampled_from(["/v2/repository/index", "/v2/models/mlp/config", "tail"]))
    def case(parts: list[str], body: bytes, where: str) -> None:
        path = (f"/v2/models/{'/'.join(parts)}/config" if where == "tail" else where)
        path = "".join(c if 0x20 < ord(c) < 0x7f and c not in "?#" else "_" for c in path)
        conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
        try:
            for method in ("GET", "POST"):
                conn.request(method, path, body=body)
                resp = conn.getresponse()
                assert resp.status in {200, 400, 404, 405}, (method, path, body)
                assert isinstance(json.loads(resp.read()), dict | list)
        finally:
            conn.close()

    case()
    assert call(server, "GET", "/v2/models/mlp/config")[0] == 200


# -- gRPC ----------------------------------------------------------------------


def test_grpc_config_matches_http(server: ServerThread,
                                  stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    config = stub.ModelConfig(pb.ModelConfigRequest(name="mlp")).config
    assert config.max_batch_size == 8 and list(config.input[0].dims) == [256]
    assert config.input[0].data_type == pb.TYPE_FP32
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8]
    assert config.instance_group[0].kind == pb.ModelInstanceGroup.KIND_CPU
    as_json = json_format.MessageToDict(config, preserving_proto_field_name=True,
                                        always_print_fields_with_no_presence=True)
    _, http_config = call(server, "GET", "/v2/models/mlp/config")
    assert json.loads(json.dumps(as_json, default=str)) == json.loads(json.dumps(
        json_format.MessageToDict(json_format.ParseDict(http_config, pb.ModelConfig()),
                                  preserving_proto_field_name=True,
                                  always_print_fields_with_no_presence=True)))
    with pytest.raises(grpc.RpcError) as caught:
        stub.ModelConfig(pb.ModelConfigRequest(name="x"))
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_grpc_statistics_count_inferences(server: ServerThread,
                                          stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    before = stub.ModelStatistics(pb.ModelStatisticsRequest(name="mlp")).model_stats[0]
    stub.ModelInfer(request(3, "s"))
    (after,) = stub.ModelStatistics(pb.ModelStatisticsRequest()).model_stats
    assert after.name == "mlp" and after.version == "1"
    assert after.inference_count == before.inference_count + 3
    assert after.inference_stats.success.count == before.inference_stats.success.count + 1
    assert after.execution_count >= before.execution_count + 1
    _, doc = call(server, "GET", "/v2/models/mlp/stats")
    assert doc["model_stats"][0]["inference_count"] == after.inference_count
    assert {b.batch_size for b in after.batch_stats} >= {3}


def test_grpc_repository_index(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    for ready in (False, True):
        (model,) = stub.RepositoryIndex(pb.RepositoryIndexRequest(ready=ready)).models
        assert (model.name, model.version, model.state) == ("mlp", "1", "READY")


def test_grpc_stream_answers_each_request_by_id(stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    sent = [request(1 + i % 8, f"r{i}") for i in range(40)]
    sent[7] = request(2, "bad", model="x")
    sent[9] = request(9, "big")  # over max_batch_size
    answers = list(stub.ModelStreamInfer(iter(sent), timeout=60))
    assert sorted(a.infer_response.id for a in answers) == sorted(m.id for m in sent)
    by_id = {a.infer_response.id: a for a in answers}
    assert "unknown model" in by_id["bad"].error_message
    assert by_id["big"].error_message
    for msg in sent:
        if msg.id in ("bad", "big"):
            continue
        answer = by_id[msg.id]
        assert not answer.error_message
        assert answer.infer_response.outputs[0].shape[0] == msg.inputs[0].shape[0]


def test_grpc_stream_is_concurrent_and_interactive(
        stub: pb_grpc.GRPCInferenceServiceStub) -> None:
    """A reply comes while the stream is still open, so requests are not held to the end."""
    more = threading.Event()

    def requests() -> Iterator[pb.ModelInferRequest]:
        yield request(1, "first")
        more.wait(30)
        yield request(2, "second")

    stream = stub.ModelStreamInfer(requests(), timeout=60)
    first = next(stream)
    more.set()
    second = next(stream)
    assert (first.infer_response.id, second.infer_response.id) == ("first", "second")
    assert list(stream) == []


def test_grpc_stream_malformed_message(server: ServerThread) -> None:
    with grpc.insecure_channel(server.grpc_target) as channel:
        raw = channel.stream_stream("/inference.GRPCInferenceService/ModelStreamInfer")
        answers = [pb.ModelStreamInferResponse.FromString(a)
                   for a in raw(iter([b"\xff\xff", request(1, "ok").SerializeToString()]),
                                timeout=30)]
    assert sorted(bool(a.error_message) for a in answers) == [False, True]
    assert any("malformed" in a.error_message for a in answers)


def test_grpc_stream_needs_the_token() -> None:
    with ServerThread(build_service("mlp", {"warmup": "0"}),
                      ServerConfig(http_port=0, grpc_port=0, auth_token="s3")) as running, \
            grpc.insecure_channel(running.grpc_target) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            list(stub.ModelStreamInfer(iter([request(1, "a")]), timeout=30))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        (answer,) = stub.ModelStreamInfer(iter([request(1, "a")]), timeout=30,
                                          metadata=[("authorization", "Bearer s3")])
        assert answer.infer_response.id == "a" and not answer.error_message
