"""Fuzz both servers with malformed messages: only declared answers, no crash, still serving.

Examples per test: `LOADGEN_FUZZ_EXAMPLES` (default 150; e.g. 10000 as a benchmark).
"""

from __future__ import annotations

import http.client
import json
import os
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import grpc
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oipwire as p
from oipwire.proto import SERVICE_NAME
from oipwire.proto import grpc_predict_v2_pb2 as pb
from sut.server.core import ServerConfig
from sut.server.thread import ServerThread
from sut.service import build_service

pytestmark = pytest.mark.functional

EXAMPLES = int(os.environ.get("LOADGEN_FUZZ_EXAMPLES", "150"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
HTTP_DECLARED = {200, 400, 404, 405, 413, 429, 503, 504}
GRPC_DECLARED = {grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND,
                 grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE,
                 grpc.StatusCode.DEADLINE_EXCEEDED}
METHODS = ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
           "ModelInfer", "ModelConfig", "ModelStatistics", "RepositoryIndex")
PATHS = ("/v2/models/mlp/infer", "/v2/models/mlp/versions/1/infer", "/v2/models/x/infer",
         "/v2/models/mlp/versions/7/infer")
VALID_ROW = [0.25] * 256

scalars = (st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                      | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=12)
names = st.sampled_from(["input", "output", "x", ""]) | st.text(max_size=4)
datatypes = st.sampled_from([*p.DATATYPES, "BF16", "fp32", ""])
dims = st.integers(-2, 300) | st.sampled_from([2**31, 2**40, 2**63 - 1])
shapes = st.lists(dims, max_size=4) | st.sampled_from([[1, 256], [2, 256], [9, 256], [0, 256]])
params = st.dictionaries(st.sampled_from(["binary_data_size", "binary_data", "binary_data_output",
                                          "priority", "timeout", "x"]), scalars, max_size=3)
numbers = st.lists(st.integers(-(2**70), 2**70) | st.floats(), max_size=300)


def often(good: Any, other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`good` three times in four, else `other`."""
    return st.one_of(st.just(good), st.just(good), st.just(good), other)


good_names = often("input", names)
good_types = often("FP32", datatypes)
good_shapes = often([1, 256], shapes)


@st.composite
def documents(draw: st.DrawFn) -> tuple[bytes, dict[str, str]]:
    """A request body, mostly well-formed JSON, with tensors near and far from valid ones."""
    inputs: list[Any] = []
    tail = b""
    for _ in range(draw(often(1, st.integers(0, 2)))):
        tensor = {"name": draw(good_names), "datatype": draw(good_types),
                  "shape": draw(good_shapes)}
        if draw(st.booleans()):
            chunk = draw(often(bytes(1024), st.binary(max_size=1100)))
            tail += chunk
            size = draw(often(len(chunk), st.integers(-1, 5000) | scalars))
            tensor["parameters"] = {p.BINARY_DATA_SIZE: size, **draw(params)}
        else:
            tensor["data"] = draw(often(VALID_ROW, numbers | values))
        inputs.append(tensor)
    doc = {"inputs": draw(often(inputs, values))}
    doc.update(draw(st.fixed_dictionaries({}, optional={
        "id": often("r1", values), "parameters": params,
        "outputs": st.lists(st.fixed_dictionaries({"name": st.just("output") | names},
                                                  optional={"parameters": params}),
                            max_size=2)})))
    header = json.dumps(doc).encode()
    tail += draw(often(b"", st.binary(max_size=16)))
    declared = draw(often(str(len(header)), st.none() | st.integers(-1, 9000).map(str)))
    return header + tail, {} if declared is None else {p.HEADER_LENGTH: declared}


header_text = st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=12)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    service = build_service("mlp", {"max_batch_size": "8", "warmup": "0"})
    config = ServerConfig(http_port=0, grpc_port=0, max_body_bytes=64 * 1024)
    with ServerThread(service, config) as running:
        yield running
        assert running.server.core.outcomes["failed"] == 0, "a request got an internal error"


class Client:
    """One keep-alive HTTP connection, reopened when the server closes it."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._where = (parts.hostname or "", parts.port)
        self._conn = http.client.HTTPConnection(*self._where, timeout=30)
        self.statuses: Counter[int] = Counter()

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
        for attempt in range(2):
            try:
                self._conn.request("POST", path, body=body, headers=headers)
                resp = self._conn.getresponse()
                data = resp.read()
                if resp.getheader("Connection", "").lower() == "close":
                    self._conn.close()
                self.statuses[resp.status] += 1
                return resp.status, data
            except (ConnectionError, http.client.HTTPException):
                self._conn.close()
                self._conn = http.client.HTTPConnection(*self._where, timeout=30)
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._conn.close()


@pytest.fixture
def client(server: ServerThread) -> Iterator[Client]:
    opened = Client(server.http_url)
    try:
        yield opened
    finally:
        opened.close()


def check_http(client: Client, path: str, body: bytes, headers: dict[str, str]) -> None:
    status, data = client.post(path, body, headers)
    assert status in HTTP_DECLARED, (status, data[:300])
    if status != 200:
        assert json.loads(data)["error"], data


def valid_http(client: Client) -> None:
    doc = {"inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 256],
                       "data": VALID_ROW}]}
    status, data = client.post(PATHS[0], json.dumps(doc).encode(), {})
    assert status == 200, data
    assert len(p.decode_response(data).outputs[0].data.ravel()) == 10


def test_http_random_bytes_and_headers(client: Client) -> None:
    @FUZZ
    @given(path=st.sampled_from(PATHS), body=st.binary(max_size=4096),
           length=st.none() | header_text | st.integers(-5, 5000).map(str),
           content_type=st.none() | header_text, auth=st.none() | header_text)
    def case(path: str, body: bytes, length: str | None, content_type: str | None,
             auth: str | None) -> None:
        headers = {k: v for k, v in ((p.HEADER_LENGTH, length), ("Content-Type", content_type),
                                     ("Authorization", auth)) if v is not None}
        check_http(client, path, body, headers)

    case()
    valid_http(client)
    print(f"http fuzz: {client.statuses.total()} random bodies and headers:"
          f" {dict(client.statuses)}")


def test_http_malformed_documents(client: Client) -> None:
    @FUZZ
    @given(request=documents(), path=st.sampled_from(PATHS[:2]))
    def case(request: tuple[bytes, dict[str, str]], path: str) -> None:
        check_http(client, path, *request)

    case()
    valid_http(client)
    print(f"http fuzz: {client.statuses.total()} malformed documents: {dict(client.statuses)}")


def valid_grpc(channel: grpc.Channel) -> None:
    infer = channel.unary_unary(f"/{SERVICE_NAME}/ModelInfer",
                                request_serializer=pb.ModelInferRequest.SerializeToString,
                                response_deserializer=pb.ModelInferResponse.FromString)
    msg = pb.ModelInferRequest(model_name="mlp")
    msg.inputs.add(name="input", datatype="FP32", shape=[1, 256])
    msg.raw_input_contents.append(np.full((1, 256), 0.25, np.float32).tobytes())
    assert len(infer(msg, timeout=10).raw_output_contents[0]) == 40


def send_raw(channel: grpc.Channel, method: str, data: bytes) -> grpc.StatusCode:
    rpc = channel.unary_unary(f"/{SERVICE_NAME}/{method}", request_serializer=None,
                              response_deserializer=None)
    try:
        rpc(data, timeout=10)
    except grpc.RpcError as err:
        code: grpc.StatusCode = err.code()
        return code
    return grpc.StatusCode.OK


def test_grpc_random_bytes(server: ServerThread) -> None:
    codes: Counter[str] = Counter()
    with grpc.insecure_channel(server.grpc_target) as channel:
        @FUZZ
        @given(method=st.sampled_from(METHODS), data=st.binary(max_size=2048))
        def case(method: str, data: bytes) -> None:
            code = send_raw(channel, method, data)
            codes[code.name] += 1
            assert code in GRPC_DECLARED

        case()
        valid_grpc(channel)
    print(f"grpc fuzz: {codes.total()} random messages: {dict(codes)}")


parameter = st.one_of(
    st.builds(pb.InferParameter, bool_param=st.booleans()),
    st.builds(pb.InferParameter, int64_param=st.integers(-(2**63), 2**63 - 1)),
    st.builds(pb.InferParameter, uint64_param=st.integers(0, 2**64 - 1)),
    st.builds(pb.InferParameter, double_param=st.floats()),
    st.builds(pb.InferParameter, string_param=st.text(max_size=5)),
    st.just(pb.InferParameter()))
grpc_params = st.dictionaries(st.sampled_from(["priority", "timeout", "binary_data_size", "x"]),
                              parameter, max_size=2)


@st.composite
def infer_messages(draw: st.DrawFn) -> pb.ModelInferRequest:
    msg = pb.ModelInferRequest(model_name=draw(st.sampled_from(["mlp"] * 8 + ["", "x"])),
                               model_version=draw(st.sampled_from(["", "1"] * 4 + ["2"])))
    for key, value in draw(grpc_params).items():
        msg.parameters[key].CopyFrom(value)
    for _ in range(draw(often(1, st.integers(0, 2)))):
        t = msg.inputs.add(name=draw(good_names), datatype=draw(good_types),
                           shape=draw(good_shapes | st.lists(st.integers(-(2**63), 2**63 - 1),
                                                             max_size=4)))
        for key, value in draw(grpc_params).items():
            t.parameters[key].CopyFrom(value)
        if draw(st.booleans()):
            t.contents.fp32_contents.extend(draw(st.just(VALID_ROW)
                                                 | st.lists(st.floats(width=32), max_size=300)))
        if draw(st.booleans()):
            t.contents.int64_contents.extend(draw(st.lists(st.integers(-(2**63), 2**63 - 1),
                                                           max_size=40)))
    for _ in range(draw(st.integers(0, 2))):
        msg.raw_input_contents.append(draw(st.just(bytes(1024)) | st.binary(max_size=1100)))
    for _ in range(draw(st.integers(0, 1))):
        msg.outputs.add(name=draw(names))
    return msg


def test_grpc_malformed_infer_requests(server: ServerThread) -> None:
    codes: Counter[str] = Counter()
    with grpc.insecure_channel(server.grpc_target) as channel:
        @FUZZ
        @given(msg=infer_messages())
        def case(msg: pb.ModelInferRequest) -> None:
            code = send_raw(channel, "ModelInfer", msg.SerializeToString())
            codes[code.name] += 1
            assert code in GRPC_DECLARED

        case()
        valid_grpc(channel)
    print(f"grpc fuzz: {codes.total()} malformed ModelInfer messages: {dict(codes)}")
