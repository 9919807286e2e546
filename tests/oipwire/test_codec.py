"""Tests for oipwire.codec: roundtrips, spec examples, malformed input (no sockets).

The tensors (`oipwire.tensors`) and gRPC field helpers (`oipwire.grpc_fields`) are tested
here too, beside the REST codec that shares their validation; the datatype table and the
tensor spec are in test_datatypes.py, the timing vocabulary in test_timing.py.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import oipwire as p
from oipwire import (
    InferRequest,
    InferResponse,
    InferTensor,
    ProtocolError,
    RequestedOutput,
)

SAMPLES: dict[str, list[Any]] = {
    "BOOL": [True, False, True, True, False, False],
    "FP16": [0.0, -1.5, 65504.0, float("inf"), float("nan"), 1e-3],
    "FP32": [0.0, -1.25, 3.4e38, float("-inf"), float("nan"), 1e-30],
    "FP64": [0.0, -1.1, 1.7e308, float("inf"), float("nan"), 5e-324],
    "BYTES": [b"", b"abc", "\u00e9t\u00e9".encode(), b"x" * 300, b"\x00", b"0"],
}


def sample(datatype: str, shape: tuple[int, ...] = (2, 3), name: str = "") -> InferTensor:
    dtype = p.numpy_dtype(datatype)
    if datatype in SAMPLES:
        values = SAMPLES[datatype]
    else:
        info = np.iinfo(dtype)
        values = [info.min, info.max, 0, 1, info.max - 1, info.min + 1]
    data = np.empty(math.prod(shape), dtype=dtype)
    data[:] = values[: data.size]
    return InferTensor(name or f"t_{datatype.lower()}", datatype, shape, data.reshape(shape))


def roundtrip_request(req: InferRequest, **kw: bool) -> InferRequest:
    body, headers = p.encode_request(req, **kw)
    return p.decode_request(body, headers.get(p.HEADER_LENGTH))


@pytest.mark.parametrize("datatype", p.DATATYPES)
@pytest.mark.parametrize("binary", [True, False])
def test_request_roundtrip_every_datatype(datatype: str, binary: bool) -> None:
    tensor = sample(datatype)
    req = InferRequest("r1", (tensor, sample("INT8", (0, 4), "empty")),
                       (RequestedOutput("out", True), RequestedOutput("b", None, {"k": 1})),
                       {"priority": 3})
    body, headers = p.encode_request(req, binary=binary, binary_outputs=False)
    assert (p.HEADER_LENGTH in headers) == binary
    back = p.decode_request(body, headers.get(p.HEADER_LENGTH))
    assert back == req
    if datatype != "BYTES":  # binary numbers are read-only views of the body
        assert back.inputs[0].data.flags.writeable == (not binary)


@pytest.mark.parametrize("datatype", p.DATATYPES)
def test_response_roundtrip_mixed_binary_and_json(datatype: str) -> None:
    timing = {name: 10**9 + i for i, name in enumerate(p.TIMING_PARAMETERS)}
    resp = InferResponse("m", "2", "r1", (sample(datatype), sample("FP32", (3,), "f")),
                         {**timing, "cached": False, "note": "x", "ratio": 0.5})
    for flags in (True, False, {sample(datatype).name}, {"f"}, set()):
        body, headers = p.encode_response(resp, flags)
        assert p.decode_response(body, headers.get(p.HEADER_LENGTH)) == resp


def test_non_utf8_bytes_travel_binary_only() -> None:
    tensor = InferTensor.from_numpy("s", np.array([b"\xff\x00", b"ok"], dtype=object))
    assert roundtrip_request(InferRequest(inputs=(tensor,))).inputs == (tensor,)
    with pytest.raises(ProtocolError, match="'s'.*UTF-8"):
        p.encode_request(InferRequest(inputs=(tensor,)), binary=False)


def test_from_numpy_and_tensor_checks() -> None:
    strings = InferTensor.from_numpy("s", np.array([["a", "bc"]]))
    assert strings.datatype == "BYTES" and strings.data.tolist() == [[b"a", b"bc"]]
    assert InferTensor.from_numpy("x", np.arange(3, dtype=">i2")).datatype == "INT16"
    with pytest.raises(ProtocolError, match="'x': data shape"):
        InferTensor("x", "FP32", (4,), np.zeros(3, np.float32))
    with pytest.raises(ProtocolError, match="'x': numpy dtype float64 does not hold FP32"):
        InferTensor("x", "FP32", (3,), np.zeros(3))


def test_binary_outputs_requested() -> None:
    on: dict[str, p.ParamValue] = {p.BINARY_DATA_OUTPUT: True}
    assert p.binary_outputs_requested(InferRequest()) is False
    assert p.binary_outputs_requested(InferRequest(parameters=on)) is True
    outs = (RequestedOutput("a"), RequestedOutput("b", False), RequestedOutput("c", True))
    assert p.binary_outputs_requested(InferRequest(outputs_requested=outs)) == {"c"}
    assert p.binary_outputs_requested(InferRequest(outputs_requested=outs, parameters=on)) == {
        "a", "c"}
    req = roundtrip_request(InferRequest(outputs_requested=outs[:1]), binary_outputs=True)
    assert req.parameters == on and p.binary_outputs_requested(req) == {"a"}


SPEC_REQUEST = b"""{
  "id" : "42",
  "inputs" : [
    {"name" : "input0", "shape" : [ 2, 2 ], "datatype" : "UINT32", "data" : [ 1, 2, 3, 4 ]},
    {"name" : "input1", "shape" : [ 3 ], "datatype" : "BOOL", "data" : [ true, false, true ]}
  ],
  "outputs" : [ {"name" : "output0"} ]
}"""


def test_spec_json_request_and_response() -> None:
    req = p.decode_request(SPEC_REQUEST, None)
    assert req.id == "42" and req.outputs_requested == (RequestedOutput("output0"),)
    assert req.inputs[0].data.dtype == np.uint32 and req.inputs[0].data.tolist() == [[1, 2], [3, 4]]
    assert req.inputs[1].data.tolist() == [True, False, True]
    # The spec's own example sends one BOOL for shape [3]: strict decoding says so.
    with pytest.raises(ProtocolError, match="input 'input1': 1 values, shape \\[3\\] needs 3"):
        p.decode_request(SPEC_REQUEST.replace(b"true, false, true", b"true"))
    resp = p.decode_response(b'{"id": "42", "outputs": [{"name": "output0", "shape": [3, 2],'
                             b' "datatype": "FP32", "data": [[1, 1.1], [2, 2.1], [3, 3.1]]}]}')
    assert resp.model_name == "" and resp.id == "42"
    want = np.array([[1, 1.1], [2, 2.1], [3, 3.1]], dtype=np.float32)
    np.testing.assert_array_equal(resp.outputs[0].data, want)


def test_triton_binary_example_by_hand() -> None:
    header = json.dumps({
        "model_name": "mymodel",
        "inputs": [
            {"name": "input0", "shape": [2, 2], "datatype": "UINT32",
             "parameters": {"binary_data_size": 16}},
            {"name": "input1", "shape": [3], "datatype": "BOOL",
             "parameters": {"binary_data_size": 3}}],
        "outputs": [{"name": "output0", "parameters": {"binary_data": True}}],
    }).encode()
    body = header + struct.pack("<4I", 1, 2, 3, 0xFFFFFFFF) + bytes([1, 0, 1])
    req = p.decode_request(body, str(len(header)))
    assert req.inputs[0].data.tolist() == [[1, 2], [3, 0xFFFFFFFF]]
    assert req.inputs[1].data.tolist() == [True, False, True]
    assert req.inputs[0].parameters == {} and p.binary_outputs_requested(req) == {"output0"}
    out = InferTensor.from_numpy("output0", np.arange(6, dtype=np.float32).reshape(3, 2))
    body, headers = p.encode_response(InferResponse("mymodel", outputs=(out,)), {"output0"})
    header_len = int(headers[p.HEADER_LENGTH])
    assert headers["Content-Type"] == p.BINARY_CONTENT_TYPE and len(body) == header_len + 24
    assert json.loads(body[:header_len])["outputs"][0]["parameters"] == {"binary_data_size": 24}
    assert body[header_len:] == struct.pack("<6f", 0, 1, 2, 3, 4, 5)
    strings = json.dumps({"inputs": [{"name": "s", "shape": [2], "datatype": "BYTES",
                                      "parameters": {"binary_data_size": 11}}]}).encode()
    req = p.decode_request(strings + b"\x03\x00\x00\x00abc\x00\x00\x00\x00", len(strings))
    assert req.inputs[0].data.tolist() == [b"abc", b""]


def nested(value: list[Any], depth: int) -> list[Any]:
    for _ in range(depth):
        value = [value]
    return value


TENSOR = {"name": "x", "shape": [2], "datatype": "INT8", "data": [1, 2]}


def doc(**fields: Any) -> bytes:
    return json.dumps({"inputs": [{**TENSOR, **fields}]}).encode()


MALFORMED: list[tuple[bytes, int | str | None, str]] = [
    (b"", None, "not valid JSON"),
    (b"[1]", None, "must be a JSON object"),
    (b"{}", None, "no 'inputs'"),
    (b'{"inputs": {}}', None, "'inputs' must be a list"),
    (b'{"inputs": [3]}', None, "inputs\\[0\\] must be an object"),
    (b'{"inputs": [], "id": 4}', None, "'id' must be a string"),
    (b'{"inputs": [], "parameters": {"a": [1]}}', None, "parameter 'a'"),
    (b'{"inputs": [], "parameters": {"binary_data_output": 1}}', None, "must be a boolean"),
    (b'{"inputs": [], "outputs": [{"name": "o", "parameters": {"binary_data": "yes"}}]}', None,
     "output 'o'.*must be a boolean"),
    (json.dumps({"inputs": [TENSOR, TENSOR]}).encode(), None, "input 'x' appears twice"),
    (doc(datatype="INT128"), None, "unknown datatype 'INT128'"),
    (doc(datatype="BF16"), None, "BF16 is not supported"),
    (doc(shape=[-2]), None, "input 'x': shape \\[-2\\]"),
    (doc(shape=[2.0]), None, "input 'x': shape"),
    (doc(shape=[1] * 33), None, "at most 32"),
    (doc(shape=[0, 2**62, 2**62]), None, "too large"),
    (doc(data=[1, 2, 3]), None, "input 'x': 3 values, shape \\[2\\] needs 2"),
    (doc(data=[1, 200]), None, "out of range for int8"),
    (doc(data=[1, 2.5]), None, "float values do not fit int8"),
    (doc(data=[True, 1]), None, "bool values"),
    (doc(data=7), None, "'data' must be"),
    (doc(datatype="FP16", data=[1, 1e6]), None, "out of range for float16"),
    (doc(datatype="FP64", data=[1, 10**400]), None, "out of range"),
    (doc(datatype="BYTES", data=["a", 1]), None, "BYTES values"),
    (doc(datatype="BYTES", data=["a", "\ud800"]), None, "not valid Unicode"),
    (doc(data=[[1], [2, 3]]), None, "3 values"),
    (json.dumps({"inputs": [{**TENSOR, "data": [[1]] * 2}]}).encode()[:-1], None, "JSON"),
    (b'{"inputs": [' + b"[" * 100_000 + b"]" * 100_000 + b"]}", None, "JSON|object"),
    (doc(data=nested([1, 2], 34)), None, "nested deeper"),
    (doc(parameters={"binary_data_size": 2}), 0, "not valid JSON"),
    (doc(parameters={"binary_data_size": 2}), None, "both 'data' and"),
    (json.dumps({"inputs": [{"name": "x", "shape": [2], "datatype": "INT8"}]}).encode(), None,
     "neither 'data' nor"),
    (doc(), -1, "outside the"),
    (doc(), "12x", "not a byte count"),
    (doc(), "9" * 40, "not a byte count"),
    (doc() + b"\x00", len(doc()), "1 bytes of binary data belong to no input"),
    (doc() + b"\x00", None, "not valid JSON"),
]


@pytest.mark.parametrize(("body", "header_length", "message"), MALFORMED)
def test_malformed_request(body: bytes, header_length: int | str | None, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        p.decode_request(body, header_length)


def binary_body(size: Any, datatype: str = "INT32", shape: list[int] | None = None,
                payload: bytes = b"\x01\x00\x00\x00" * 2) -> tuple[bytes, int]:
    header = json.dumps({"inputs": [{"name": "b", "datatype": datatype, "shape": shape or [2],
                                     "parameters": {"binary_data_size": size}}]}).encode()
    return header + payload, len(header)


@pytest.mark.parametrize(("args", "message"), [
    ((7,), "input 'b': 7 bytes of data, but shape \\[2\\] of INT32 needs 8"),
    ((9,), "binary_data_size 9 does not fit the 8 bytes"),
    ((-1,), "binary_data_size -1"),
    (("8",), "binary_data_size '8'"),
    ((4,), "input 'b': 4 bytes of data"),
    ((8, "INT32", [2**30, 2**20]), "needs 4503599627370496"),
    ((8, "BOOL", [8], b"\x01" * 7 + b"\x02"), "input 'b': BOOL bytes must be 0 or 1"),
    ((8, "BYTES", [2], b"\x05\x00\x00\x00abcd"), "element 0 of 5 bytes overruns"),
    ((8, "BYTES", [3], b"\x00" * 8), "8 bytes cannot hold 3 BYTES elements"),
    ((8, "BYTES", [2], b"\x02\x00\x00\x00ab\x00\x00"), "ends inside element 1"),
    ((8, "BYTES", [1], b"\x00" * 8), "4 bytes after 1 BYTES elements"),
])
def test_malformed_binary_data(args: tuple[Any, ...], message: str) -> None:
    body, header_length = binary_body(*args)
    with pytest.raises(ProtocolError, match=message):
        p.decode_request(body, header_length)


def test_malformed_response() -> None:
    with pytest.raises(ProtocolError, match="server error: no such model"):
        p.decode_response(p.error_body("no such model"))
    with pytest.raises(ProtocolError, match="no 'outputs'"):
        p.decode_response(b"{}")
    with pytest.raises(ProtocolError, match="'model_name' must be a string"):
        p.decode_response(b'{"model_name": 1, "outputs": []}')
    with pytest.raises(ProtocolError, match="output 'y': 2 values, shape \\[\\] needs 1"):
        p.decode_response(b'{"outputs": [{"name": "y", "shape": [], "datatype": "FP32",'
                          b' "data": [1, 2]}]}')


def test_parameter_values_roundtrip_and_limits() -> None:
    params: dict[str, p.ParamValue] = {"i": -(2**63), "u": 2**64 - 1, "b": True, "s": "",
                                       "d": 0.25, p.QUEUE_NS: 123}
    resp = p.decode_response(p.encode_response(InferResponse("m", parameters=params), False)[0])
    assert resp.parameters == params and type(resp.parameters["b"]) is bool
    assert [p.parameter_field(v) for v in params.values()] == [
        "int64_param", "uint64_param", "bool_param", "string_param", "double_param",
        "int64_param"]
    np_params = {"n": np.int64(5), "f": np.float32(0.5), "t": np.bool_(True)}
    body, _ = p.encode_response(InferResponse("m", parameters=np_params), False)  # type: ignore[arg-type]
    assert p.decode_response(body).parameters == {"n": 5, "f": 0.5, "t": True}
    for bad in (2**64, None, [1]):
        with pytest.raises(ProtocolError):
            p.parameter_field(bad)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="does not fit 64 bits"):
        p.decode_response(b'{"outputs": [], "parameters": {"x": 18446744073709551616}}')


@pytest.mark.parametrize("datatype", p.DATATYPES)
def test_raw_and_contents_roundtrip(datatype: str) -> None:
    tensor = sample(datatype)
    raw = p.tensor_to_raw(tensor)
    assert p.tensor_from_raw(tensor.name, datatype, [2, 3], raw) == tensor
    if datatype == "FP16":
        with pytest.raises(ProtocolError, match="FP16 has no typed contents field"):
            p.tensor_to_contents(tensor)
        return
    field, values = p.tensor_to_contents(tensor)
    assert field.endswith("_contents")
    assert p.tensor_from_contents(tensor.name, datatype, (2, 3), values) == tensor


def test_contents_errors() -> None:
    assert p.contents_field("UINT16") == "uint_contents"
    with pytest.raises(ProtocolError, match="'c': 2 values in int_contents, shape \\[3\\]"):
        p.tensor_from_contents("c", "INT32", [3], [1, 2])
    with pytest.raises(ProtocolError, match="out of range for int8"):
        p.tensor_from_contents("c", "INT8", [1], [1000])
    with pytest.raises(ProtocolError, match="BYTES element is str"):
        p.tensor_to_raw(InferTensor("c", "BYTES", (1,), np.array(["s"], dtype=object)))


def test_metadata_documents() -> None:
    assert p.server_metadata("sut", "0.1") == {
        "name": "sut", "version": "0.1", "extensions": ["binary_tensor_data"]}
    meta = p.model_metadata("digits", ["1"], "pytorch", [("x", "FP32", (-1, 64))],
                            [("y", "INT64", [-1])])
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 64]}]
    assert json.loads(json.dumps(meta))["outputs"][0]["shape"] == [-1]
    with pytest.raises(ProtocolError, match="'x': bad metadata shape"):
        p.model_metadata("m", [], "p", [("x", "FP32", [-2])], [])
    assert json.loads(p.error_body('bad "x"')) == {"error": 'bad "x"'}


# --- property tests: any input gives a request or a ProtocolError, never another error ---

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                              max_size=4), max_leaves=20)
tensor_docs = st.fixed_dictionaries(
    {"name": st.text(max_size=3), "datatype": st.sampled_from([*p.DATATYPES, "BF16", "X"]),
     "shape": st.lists(st.integers(-2, 2**62), max_size=4)},
    optional={"data": json_values, "parameters": st.dictionaries(
        st.sampled_from(["binary_data_size", "k"]), st.integers(-2, 64) | json_values)})
settings_ = settings(max_examples=300, deadline=None,
                     suppress_health_check=[HealthCheck.too_slow])


def decodes_or_protocol_error(body: bytes, header_length: int | str | None) -> None:
    for decode in (p.decode_request, p.decode_response):
        try:
            decode(body, header_length)
        except ProtocolError:
            pass


@settings_
@given(st.binary(max_size=200), st.none() | st.integers(-5, 250) | st.text(max_size=4))
def test_random_bytes(body: bytes, header_length: int | str | None) -> None:
    decodes_or_protocol_error(body, header_length)


@settings_
@given(json_values | st.fixed_dictionaries({"inputs": st.lists(tensor_docs, max_size=3),
                                            "outputs": st.lists(tensor_docs, max_size=3)}),
       st.binary(max_size=64))
def test_random_json(value: Any, tail: bytes) -> None:
    header = json.dumps(value).encode()
    decodes_or_protocol_error(header, None)
    decodes_or_protocol_error(header + tail, len(header))


@settings_
@given(st.sampled_from(p.DATATYPES), st.booleans(), st.data())
def test_corrupted_valid_bodies(datatype: str, binary: bool, data: st.DataObject) -> None:
    body, headers = p.encode_request(InferRequest(inputs=(sample(datatype),)), binary=binary)
    length = int(headers.get(p.HEADER_LENGTH, len(body)))
    cut = data.draw(st.integers(0, len(body)))
    flip = data.draw(st.integers(0, len(body) - 1))
    corrupted = body[:flip] + bytes([body[flip] ^ data.draw(st.integers(1, 255))]) + body[flip+1:]
    decodes_or_protocol_error(body[:cut], min(length, cut))
    decodes_or_protocol_error(corrupted, length)
    decodes_or_protocol_error(body, length + data.draw(st.integers(-length, 40)))


def test_real_servers_nulls_are_absent_fields() -> None:
    doc = {"model_name": "m", "model_version": None, "id": None, "parameters": None,
           "outputs": [{"name": "y", "datatype": "FP32", "shape": [2], "parameters": None,
                        "data": [1.0, 2.0]}]}
    resp = p.decode_response(json.dumps(doc).encode())
    assert (resp.model_version, resp.id, resp.parameters) == ("", "", {})
    assert resp.outputs[0].parameters == {} and resp.outputs[0].data.tolist() == [1.0, 2.0]
