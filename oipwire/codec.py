"""Open Inference Protocol (KServe v2 / Triton) codec: pure functions over bytes, dicts, numpy.

HTTP/REST: a body is one JSON object, optionally followed by raw tensor bytes (Triton's binary
tensor data extension); the JSON length then travels in the `Inference-Header-Content-Length`
header. `encode_request`/`decode_request` and `encode_response`/`decode_response` do all of it;
the server or client only moves the body and the headers they return or take.

gRPC (`oipwire.proto`): wiring copies protobuf fields into `tensor_from_raw` /
`tensor_from_contents` and back out of `tensor_to_raw` / `tensor_to_contents`; each parameter
value goes in the `InferParameter` field `parameter_field(value)` names.

Every malformed input raises `ProtocolError` (answer HTTP 400 / gRPC INVALID_ARGUMENT) naming
the tensor and the problem. Tensors decoded from binary data are read-only views of the body.
About 570 lines, past the 400 guideline: requests and responses, JSON and binary, HTTP and
gRPC share one validation core, and splitting it would spread one wire format over files.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

__all__ = [
    "BATCH_FORMATION_NS", "BATCH_SIZE", "BINARY_CONTENT_TYPE", "BINARY_DATA", "BINARY_DATA_OUTPUT",
    "BINARY_DATA_SIZE", "COMPUTE_NS", "DATATYPES", "EXTENSION_BINARY_TENSOR_DATA", "HEADER_LENGTH",
    "JSON_CONTENT_TYPE", "MAX_DIMS", "QUEUE_NS", "SERVER_TOTAL_NS", "TIMING_PARAMETERS",
    "InferRequest", "InferResponse", "InferTensor", "ParamValue", "ProtocolError",
    "RequestedOutput", "binary_outputs_requested",
    "contents_field", "datatype_of", "decode_request", "decode_response", "encode_request",
    "encode_response", "error_body", "model_metadata", "numpy_dtype", "parameter_field",
    "server_metadata", "tensor_from_contents", "tensor_from_raw", "tensor_to_contents",
    "tensor_to_raw",
]

ParamValue = bool | int | float | str
"""A parameter value: JSON string/number/boolean; gRPC `InferParameter`."""

HEADER_LENGTH = "Inference-Header-Content-Length"
JSON_CONTENT_TYPE = "application/json"
BINARY_CONTENT_TYPE = "application/octet-stream"
EXTENSION_BINARY_TENSOR_DATA = "binary_tensor_data"
BINARY_DATA_SIZE = "binary_data_size"  # tensor parameter: bytes of its binary data
BINARY_DATA = "binary_data"  # requested-output parameter: return this output as binary
BINARY_DATA_OUTPUT = "binary_data_output"  # request parameter: default for all outputs

QUEUE_NS = "queue_ns"  # waiting in the batcher's queue
BATCH_FORMATION_NS = "batch_formation_ns"  # assembling the batch it ran in
COMPUTE_NS = "compute_ns"  # model execution of that batch
SERVER_TOTAL_NS = "server_total_ns"  # request received to response encoded
BATCH_SIZE = "batch_size"  # samples in the batch it ran in
TIMING_PARAMETERS = (QUEUE_NS, BATCH_FORMATION_NS, COMPUTE_NS, SERVER_TOTAL_NS, BATCH_SIZE)
"""Int response parameters a server may report: durations in ns (never clock times)."""

MAX_DIMS = 32
_MAX_ELEMENTS = 2**59  # numpy needs elements * 8 bytes to fit an intp, even for empty tensors
_INT64, _UINT64_END = (-(2**63), 2**63), 2**64
_LEN = struct.Struct("<I")
_NO_PARAMS: Mapping[str, ParamValue] = MappingProxyType({})

_DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(code) for name, code in [
        ("BOOL", "?"), ("UINT8", "<u1"), ("UINT16", "<u2"), ("UINT32", "<u4"), ("UINT64", "<u8"),
        ("INT8", "<i1"), ("INT16", "<i2"), ("INT32", "<i4"), ("INT64", "<i8"),
        ("FP16", "<f2"), ("FP32", "<f4"), ("FP64", "<f8"), ("BYTES", "O"),
    ]
}
DATATYPES = tuple(_DTYPES)
"""Supported datatypes; BF16 is valid on the wire but unsupported (numpy has no bfloat16)."""

_CONTENTS = {"BOOL": "bool_contents", "INT64": "int64_contents", "UINT64": "uint64_contents",
             "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
             **dict.fromkeys(("INT8", "INT16", "INT32"), "int_contents"),
             **dict.fromkeys(("UINT8", "UINT16", "UINT32"), "uint_contents")}


class ProtocolError(ValueError):
    """A message that breaks the protocol; the text says which tensor and why."""


def numpy_dtype(datatype: str) -> np.dtype[Any]:
    """The little-endian numpy dtype of a wire datatype (`object` for BYTES)."""
    if datatype == "BF16":
        raise ProtocolError("datatype BF16 is not supported (numpy has no bfloat16)")
    try:
        return _DTYPES[datatype]
    except (KeyError, TypeError):
        raise ProtocolError(f"unknown datatype {datatype!r}") from None


def datatype_of(dtype: np.dtype[Any]) -> str:
    """The wire datatype of a numpy dtype; object, bytes and str arrays are BYTES."""
    if dtype.kind in "OSU":
        return "BYTES"
    for name, known in _DTYPES.items():
        if known == dtype.newbyteorder("<"):
            return name
    raise ProtocolError(f"numpy dtype {dtype} has no Open Inference Protocol datatype")


@dataclass(frozen=True, slots=True, eq=False)
class InferTensor:
    """A named tensor; `data.shape == shape` and its dtype matches `datatype` (checked)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    data: np.ndarray[Any, Any]
    parameters: dict[str, ParamValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        want = numpy_dtype(self.datatype)
        if self.data.shape != self.shape:
            raise ProtocolError(f"tensor {self.name!r}: data shape {list(self.data.shape)}"
                                f" differs from shape {list(self.shape)}")
        if want != self.data.dtype.newbyteorder("<"):
            raise ProtocolError(f"tensor {self.name!r}: numpy dtype {self.data.dtype}"
                                f" does not hold {self.datatype}")

    @classmethod
    def from_numpy(cls, name: str, array: Any,
                   parameters: Mapping[str, ParamValue] = _NO_PARAMS) -> InferTensor:
        """Wrap an array, inferring the datatype; bytes/str arrays become BYTES objects."""
        array = np.asarray(array)
        if array.dtype.kind in "SU":
            array = _cast(array.ravel().tolist(), _DTYPES["BYTES"], repr(name)).reshape(array.shape)
        return cls(name, datatype_of(array.dtype), array.shape, array, dict(parameters))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InferTensor):
            return NotImplemented
        a, b = self.data, other.data
        return ((self.name, self.datatype, self.shape, self.parameters)
                == (other.name, other.datatype, other.shape, other.parameters)
                and a.dtype == b.dtype
                and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f")))


@dataclass(frozen=True, slots=True)
class RequestedOutput:
    """An output the client asks for; `binary_data=None` follows `binary_data_output`."""

    name: str
    binary_data: bool | None = None
    parameters: dict[str, ParamValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InferRequest:
    """An inference request; the model name and version travel in the URL or gRPC message."""

    id: str = ""
    inputs: tuple[InferTensor, ...] = ()
    outputs_requested: tuple[RequestedOutput, ...] = ()  # empty: every output
    parameters: dict[str, ParamValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InferResponse:
    """An inference response; server timings go in `parameters` (see TIMING_PARAMETERS)."""

    model_name: str
    model_version: str = ""
    id: str = ""
    outputs: tuple[InferTensor, ...] = ()
    parameters: dict[str, ParamValue] = field(default_factory=dict)


def binary_outputs_requested(req: InferRequest) -> set[str] | bool:
    """What a server passes to `encode_response`: the outputs the client wants as binary."""
    default = req.parameters.get(BINARY_DATA_OUTPUT) is True
    if not req.outputs_requested:
        return default
    return {o.name for o in req.outputs_requested
            if (default if o.binary_data is None else o.binary_data)}


# --- HTTP/REST ----------------------------------------------------------------------------


def encode_request(req: InferRequest, binary: bool = True, binary_outputs: bool = True,
                   ) -> tuple[bytes, dict[str, str]]:
    """Body and headers (Content-Type, plus the header length when binary data follows).

    `binary` sends inputs as binary data; `binary_outputs` sets `binary_data_output`, which a
    RequestedOutput's own `binary_data` overrides.
    """
    params = _json_params(req.parameters)
    if binary_outputs:
        params[BINARY_DATA_OUTPUT] = True
    else:
        params.pop(BINARY_DATA_OUTPUT, None)
    doc: dict[str, Any] = {"id": req.id} if req.id else {}
    if params:
        doc["parameters"] = params
    outputs = []
    for out in req.outputs_requested:
        out_params = _json_params(out.parameters)
        if out.binary_data is not None:
            out_params[BINARY_DATA] = out.binary_data
        outputs.append({"name": out.name, "parameters": out_params} if out_params
                       else {"name": out.name})
    doc["inputs"] = []
    if outputs:
        doc["outputs"] = outputs
    return _encode_http(doc, doc["inputs"], req.inputs, [binary] * len(req.inputs))


def encode_response(resp: InferResponse, binary_outputs: AbstractSet[str] | bool,
                    ) -> tuple[bytes, dict[str, str]]:
    """Body and headers; `binary_outputs` is True, False or the names to send as binary."""
    doc: dict[str, Any] = {"model_name": resp.model_name}
    if resp.model_version:
        doc["model_version"] = resp.model_version
    if resp.id:
        doc["id"] = resp.id
    if resp.parameters:
        doc["parameters"] = _json_params(resp.parameters)
    doc["outputs"] = []
    mask = [binary_outputs if isinstance(binary_outputs, bool) else t.name in binary_outputs
            for t in resp.outputs]
    return _encode_http(doc, doc["outputs"], resp.outputs, mask)


def decode_request(body: bytes, header_length: int | str | None = None) -> InferRequest:
    """Parse a request body; `header_length` is the `HEADER_LENGTH` header value, if sent.

    Nested `data` lists are flattened in order; unknown keys (e.g. Triton's `model_name`) are
    ignored; `binary_data_size` is removed from tensor parameters, `binary_data` from requested
    outputs' parameters (into `RequestedOutput.binary_data`).
    """
    doc, binary = _split(body, header_length)
    ident = _string(doc, "id")
    params = _params(doc.get("parameters", {}), "request")
    if not isinstance(params.get(BINARY_DATA_OUTPUT, False), bool):
        raise ProtocolError(f"request parameter {BINARY_DATA_OUTPUT!r} must be a boolean")
    if "inputs" not in doc:
        raise ProtocolError("request has no 'inputs'")
    inputs = _decode_tensors(doc["inputs"], "input", binary)
    outputs = []
    for i, item in enumerate(_list(doc.get("outputs", []), "outputs")):
        name = _name(item, f"outputs[{i}]")
        out_params = _params(item.get("parameters", {}), f"output {name!r}")
        flag = out_params.pop(BINARY_DATA, None)
        if flag is not None and not isinstance(flag, bool):
            raise ProtocolError(f"output {name!r}: parameter {BINARY_DATA!r} must be a boolean")
        outputs.append(RequestedOutput(name, flag, out_params))
    return InferRequest(ident, inputs, tuple(outputs), params)


def decode_response(body: bytes, header_length: int | str | None = None) -> InferResponse:
    """Parse an inference response body; an `{"error": ...}` document raises ProtocolError."""
    doc, binary = _split(body, header_length)
    if "outputs" not in doc:
        raise ProtocolError(f"server error: {doc['error']}" if "error" in doc
                            else "response has no 'outputs'")
    return InferResponse(
        _string(doc, "model_name"), _string(doc, "model_version"), _string(doc, "id"),
        _decode_tensors(doc["outputs"], "output", binary),
        _params(doc.get("parameters", {}), "response"))


def server_metadata(name: str, version: str, extensions: Iterable[str] = (
        EXTENSION_BINARY_TENSOR_DATA,)) -> dict[str, Any]:
    """The `GET /v2` document: `json.dumps` it, or `pb.ServerMetadataResponse(**doc)`."""
    return {"name": name, "version": version, "extensions": list(extensions)}


def model_metadata(name: str, versions: Iterable[str], platform: str,
                   inputs: Iterable[tuple[str, str, Sequence[int]]],
                   outputs: Iterable[tuple[str, str, Sequence[int]]]) -> dict[str, Any]:
    """The `GET /v2/models/<name>` document (also gRPC kwargs); -1 marks a variable dim."""
    def tensors(specs: Iterable[tuple[str, str, Sequence[int]]]) -> list[dict[str, Any]]:
        out = []
        for tname, datatype, shape in specs:
            numpy_dtype(datatype)
            if any(type(d) is not int or d < -1 for d in shape):
                raise ProtocolError(f"tensor {tname!r}: bad metadata shape {list(shape)}")
            out.append({"name": tname, "datatype": datatype, "shape": list(shape)})
        return out
    return {"name": name, "versions": list(versions), "platform": platform,
            "inputs": tensors(inputs), "outputs": tensors(outputs)}


def error_body(message: str) -> bytes:
    """The JSON error document `{"error": message}` of a failed HTTP request."""
    return json.dumps({"error": message}).encode()


# --- gRPC and raw tensor bytes ------------------------------------------------------------


def tensor_from_raw(name: str, datatype: str, shape: Sequence[int], raw: bytes | memoryview,
                    parameters: Mapping[str, ParamValue] = _NO_PARAMS) -> InferTensor:
    """A tensor from raw little-endian row-major bytes (`raw_*_contents`, HTTP binary data)."""
    data = _from_raw(datatype, shape, raw, f"tensor {name!r}")
    return InferTensor(name, datatype, tuple(shape), data, dict(parameters))


def tensor_to_raw(tensor: InferTensor) -> bytes:
    """Raw bytes of a tensor; BYTES elements are each prefixed by a 4-byte LE length."""
    if tensor.datatype != "BYTES":
        return np.ascontiguousarray(tensor.data, numpy_dtype(tensor.datatype)).tobytes()
    parts: list[bytes] = []
    for item in tensor.data.ravel():
        if not isinstance(item, bytes):
            raise ProtocolError(f"tensor {tensor.name!r}: BYTES element is {type(item).__name__}")
        parts += (_LEN.pack(len(item)), item)
    return b"".join(parts)


def contents_field(datatype: str) -> str:
    """The `InferTensorContents` field that carries `datatype` (FP16 has none: use raw)."""
    numpy_dtype(datatype)
    if datatype not in _CONTENTS:
        raise ProtocolError(f"{datatype} has no typed contents field; send raw contents")
    return _CONTENTS[datatype]


def tensor_from_contents(name: str, datatype: str, shape: Sequence[int], values: Iterable[Any],
                         parameters: Mapping[str, ParamValue] = _NO_PARAMS) -> InferTensor:
    """A tensor from the values of its `contents_field(datatype)` repeated field."""
    ctx = f"tensor {name!r}"
    dtype, count, field_name = numpy_dtype(datatype), _count(shape, ctx), contents_field(datatype)
    items = list(values)
    if len(items) != count:
        raise ProtocolError(f"{ctx}: {len(items)} values in {field_name}, shape {list(shape)}"
                            f" needs {count}")
    return InferTensor(name, datatype, tuple(shape),
                       _cast(items, dtype, ctx).reshape(tuple(shape)), dict(parameters))


def tensor_to_contents(tensor: InferTensor) -> tuple[str, list[Any]]:
    """(field name, values) for the tensor's `InferTensorContents`."""
    return contents_field(tensor.datatype), tensor.data.ravel().tolist()


def parameter_field(value: ParamValue) -> str:
    """The `InferParameter` oneof field for a value: `setattr(msg, field, value)`."""
    if isinstance(value, bool):
        return "bool_param"
    if isinstance(value, int):
        if _INT64[0] <= value < _UINT64_END:
            return "int64_param" if value < _INT64[1] else "uint64_param"
        raise ProtocolError(f"parameter value {value} does not fit 64 bits")
    if isinstance(value, float):
        return "double_param"
    if isinstance(value, str):
        return "string_param"
    raise ProtocolError(f"parameter value of type {type(value).__name__} is not supported")


# --- internals ----------------------------------------------------------------------------


def _encode_http(doc: dict[str, Any], entries: list[dict[str, Any]],
                 tensors: Sequence[InferTensor], binary: Sequence[bool],
                 ) -> tuple[bytes, dict[str, str]]:
    chunks: list[bytes] = []
    for tensor, as_binary in zip(tensors, binary, strict=True):
        entry: dict[str, Any] = {"name": tensor.name, "datatype": tensor.datatype,
                                 "shape": list(tensor.shape)}
        params = _json_params(tensor.parameters)
        params.pop(BINARY_DATA_SIZE, None)
        if as_binary:
            chunks.append(tensor_to_raw(tensor))
            params[BINARY_DATA_SIZE] = len(chunks[-1])
        if params:
            entry["parameters"] = params
        if not as_binary:
            entry["data"] = _json_data(tensor)
        entries.append(entry)
    header = json.dumps(doc, separators=(",", ":")).encode()
    if not chunks:
        return header, {"Content-Type": JSON_CONTENT_TYPE}
    return (b"".join([header, *chunks]),
            {"Content-Type": BINARY_CONTENT_TYPE, HEADER_LENGTH: str(len(header))})


def _json_data(tensor: InferTensor) -> list[Any]:
    values: list[Any] = tensor.data.ravel().tolist()
    if tensor.datatype != "BYTES":
        return values
    try:
        return [v.decode() for v in values]
    except (AttributeError, UnicodeDecodeError):
        raise ProtocolError(f"tensor {tensor.name!r}: BYTES elements must be UTF-8 bytes to"
                            " travel as JSON; send it as binary data") from None


def _json_params(params: Mapping[str, ParamValue]) -> dict[str, ParamValue]:
    out: dict[str, ParamValue] = {}
    for key, value in params.items():
        if isinstance(value, np.generic):
            value = value.item()
        parameter_field(value)
        out[key] = value
    return out


def _split(body: bytes, header_length: int | str | None) -> tuple[dict[str, Any], memoryview]:
    if isinstance(header_length, str):
        if not (header_length.isascii() and header_length.isdigit() and len(header_length) < 20):
            raise ProtocolError(f"{HEADER_LENGTH} {header_length!r} is not a byte count")
        header_length = int(header_length)
    size = len(body) if header_length is None else header_length
    if not 0 <= size <= len(body):
        raise ProtocolError(f"{HEADER_LENGTH} {size} is outside the {len(body)}-byte body")
    try:
        doc = json.loads(bytes(body[:size]))
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"body is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ProtocolError("body must be a JSON object")
    return doc, memoryview(body)[size:]


def _decode_tensors(items: Any, kind: str, binary: memoryview) -> tuple[InferTensor, ...]:
    tensors: list[InferTensor] = []
    offset = 0
    for i, item in enumerate(_list(items, f"{kind}s")):
        name = _name(item, f"{kind}s[{i}]")
        ctx = f"{kind} {name!r}"
        if any(t.name == name for t in tensors):
            raise ProtocolError(f"{ctx} appears twice")
        datatype, shape = item.get("datatype"), item.get("shape")
        if not isinstance(datatype, str) or not isinstance(shape, list):
            raise ProtocolError(f"{ctx}: needs a string 'datatype' and a list 'shape'")
        numpy_dtype(datatype)
        params = _params(item.get("parameters", {}), ctx)
        size = params.pop(BINARY_DATA_SIZE, None)
        if size is None:
            if "data" not in item:
                raise ProtocolError(f"{ctx}: has neither 'data' nor {BINARY_DATA_SIZE!r}")
            count, values = _count(shape, ctx), _flatten(item["data"], ctx, 0)
            if len(values) != count:
                raise ProtocolError(f"{ctx}: {len(values)} values, shape {shape} needs {count}")
            data = _cast(values, numpy_dtype(datatype), ctx)
            tensors.append(InferTensor(name, datatype, tuple(shape), data.reshape(shape), params))
            continue
        if "data" in item:
            raise ProtocolError(f"{ctx}: has both 'data' and {BINARY_DATA_SIZE!r}")
        if type(size) is not int or not 0 <= size <= len(binary) - offset:
            raise ProtocolError(f"{ctx}: {BINARY_DATA_SIZE} {size!r} does not fit the"
                                f" {len(binary) - offset} bytes of binary data left")
        data = _from_raw(datatype, shape, binary[offset:offset + size], ctx)
        tensors.append(InferTensor(name, datatype, tuple(shape), data, params))
        offset += size
    if offset != len(binary):
        raise ProtocolError(f"{len(binary) - offset} bytes of binary data belong to no {kind}")
    return tuple(tensors)


def _count(shape: Sequence[Any], ctx: str) -> int:
    if len(shape) > MAX_DIMS or any(type(d) is not int or d < 0 for d in shape):
        raise ProtocolError(f"{ctx}: shape {list(shape)} must be at most {MAX_DIMS}"
                            " non-negative integers")
    if math.prod(max(d, 1) for d in shape) > _MAX_ELEMENTS:
        raise ProtocolError(f"{ctx}: shape {list(shape)} is too large")
    return math.prod(shape)


def _flatten(data: Any, ctx: str, depth: int) -> list[Any]:
    if not isinstance(data, list):
        raise ProtocolError(f"{ctx}: 'data' must be a (possibly nested) list")
    if depth > MAX_DIMS:
        raise ProtocolError(f"{ctx}: 'data' is nested deeper than {MAX_DIMS} levels")
    if not any(isinstance(x, list) for x in data):
        return data
    flat: list[Any] = []
    for x in data:
        flat.extend(_flatten(x, ctx, depth + 1) if isinstance(x, list) else [x])
    return flat


def _cast(values: list[Any], dtype: np.dtype[Any], ctx: str) -> np.ndarray[Any, Any]:
    """Typed values (JSON data or gRPC contents) into a flat array, refusing lossy ones."""
    types, kind = set(map(type, values)), dtype.kind
    if kind == "O":
        if not types <= {str, bytes}:
            raise ProtocolError(f"{ctx}: BYTES values must be strings (JSON) or bytes")
        out = np.empty(len(values), dtype=object)
        try:
            out[:] = [v.encode() if isinstance(v, str) else v for v in values]
        except UnicodeEncodeError:
            raise ProtocolError(f"{ctx}: a BYTES string is not valid Unicode") from None
        return out
    allowed = {bool} if kind == "b" else {int} if kind in "iu" else {int, float}
    if not types <= allowed:
        names = sorted(t.__name__ for t in types - allowed)
        raise ProtocolError(f"{ctx}: {', '.join(names)} values do not fit {dtype.name}")
    if kind in "iu" and values:
        info = np.iinfo(dtype)
        if min(values) < info.min or max(values) > info.max:
            raise ProtocolError(f"{ctx}: values out of range for {dtype.name}")
    try:
        with np.errstate(over="raise"):
            return np.array(values, dtype=dtype)
    except (OverflowError, FloatingPointError):
        raise ProtocolError(f"{ctx}: values out of range for {dtype.name}") from None


def _from_raw(datatype: str, shape: Sequence[int], raw: bytes | memoryview, ctx: str,
              ) -> np.ndarray[Any, Any]:
    dtype, count = numpy_dtype(datatype), _count(shape, ctx)
    if datatype == "BYTES":
        return _unpack_bytes(memoryview(raw), count, ctx).reshape(tuple(shape))
    if len(raw) != count * dtype.itemsize:
        raise ProtocolError(f"{ctx}: {len(raw)} bytes of data, but shape {list(shape)} of"
                            f" {datatype} needs {count * dtype.itemsize}")
    data = np.frombuffer(raw, dtype=dtype, count=count)
    if datatype == "BOOL" and count and data.view(np.uint8).max() > 1:
        raise ProtocolError(f"{ctx}: BOOL bytes must be 0 or 1")
    return data.reshape(tuple(shape))


def _unpack_bytes(raw: memoryview, count: int, ctx: str) -> np.ndarray[Any, Any]:
    if count * _LEN.size > len(raw):
        raise ProtocolError(f"{ctx}: {len(raw)} bytes cannot hold {count} BYTES elements")
    out, offset = np.empty(count, dtype=object), 0
    for i in range(count):
        if offset + _LEN.size > len(raw):
            raise ProtocolError(f"{ctx}: BYTES data ends inside element {i}'s length")
        (length,) = _LEN.unpack_from(raw, offset)
        offset += _LEN.size
        if offset + length > len(raw):
            raise ProtocolError(f"{ctx}: BYTES element {i} of {length} bytes overruns the data")
        out[i] = bytes(raw[offset:offset + length])
        offset += length
    if offset != len(raw):
        raise ProtocolError(f"{ctx}: {len(raw) - offset} bytes after {count} BYTES elements")
    return out


def _params(obj: Any, ctx: str) -> dict[str, ParamValue]:
    if not isinstance(obj, dict):
        raise ProtocolError(f"{ctx}: 'parameters' must be an object")
    for key, value in obj.items():
        try:
            parameter_field(value)
        except ProtocolError as exc:
            raise ProtocolError(f"{ctx}: parameter {key!r}: {exc}") from None
    return dict(obj)


def _list(obj: Any, what: str) -> list[Any]:
    if not isinstance(obj, list):
        raise ProtocolError(f"'{what}' must be a list")
    return obj


def _name(item: Any, where: str) -> str:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str):
        raise ProtocolError(f"{where} must be an object with a string 'name'")
    name: str = item["name"]
    return name


def _string(doc: dict[str, Any], key: str) -> str:
    value = doc.get(key, "")
    if not isinstance(value, str):
        raise ProtocolError(f"'{key}' must be a string")
    return value
