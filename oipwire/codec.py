"""Open Inference Protocol over HTTP/REST: pure functions from values to bytes and back.

A body is one JSON object, optionally followed by raw tensor bytes (Triton's binary tensor
data extension); the JSON length then travels in the `Inference-Header-Content-Length`
header. `encode_request`/`decode_request` and `encode_response`/`decode_response` do all of
it; the server or client only moves the body and the headers they return or take.
`server_metadata` and `model_metadata` build the metadata documents (also the gRPC
messages' kwargs); `error_body` the error document.

Every malformed input raises `ProtocolError` (answer HTTP 400) naming the tensor and the
problem. Tensors decoded from binary data are read-only views of the body.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any

import numpy as np

from oipwire.datatypes import MAX_DIMS, TensorSpec, element_count, numpy_dtype
from oipwire.errors import ProtocolError
from oipwire.grpc_fields import parameter_field
from oipwire.messages import InferRequest, InferResponse, RequestedOutput
from oipwire.tensors import InferTensor, ParamValue, raw_array, tensor_to_raw, values_array

__all__ = [
    "BINARY_CONTENT_TYPE", "BINARY_DATA", "BINARY_DATA_OUTPUT", "BINARY_DATA_SIZE",
    "EXTENSION_BINARY_TENSOR_DATA", "HEADER_LENGTH", "JSON_CONTENT_TYPE",
    "binary_outputs_requested", "decode_request", "decode_response", "encode_request",
    "encode_response", "error_body", "model_metadata", "server_metadata",
]

HEADER_LENGTH = "Inference-Header-Content-Length"
JSON_CONTENT_TYPE = "application/json"
BINARY_CONTENT_TYPE = "application/octet-stream"
EXTENSION_BINARY_TENSOR_DATA = "binary_tensor_data"
BINARY_DATA_SIZE = "binary_data_size"  # tensor parameter: bytes of its binary data
BINARY_DATA = "binary_data"  # requested-output parameter: return this output as binary
BINARY_DATA_OUTPUT = "binary_data_output"  # request parameter: default for all outputs


def binary_outputs_requested(req: InferRequest) -> set[str] | bool:
    """What a server passes to `encode_response`: the outputs the client wants as binary."""
    default = req.parameters.get(BINARY_DATA_OUTPUT) is True
    if not req.outputs_requested:
        return default
    return {o.name for o in req.outputs_requested
            if (default if o.binary_data is None else o.binary_data)}


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
                   inputs: Iterable[TensorSpec | tuple[str, str, Sequence[int]]],
                   outputs: Iterable[TensorSpec | tuple[str, str, Sequence[int]]],
                   ) -> dict[str, Any]:
    """The `GET /v2/models/<name>` document (also gRPC kwargs); -1 marks a variable dim.

    Tensors are `TensorSpec`s or (name, datatype, shape) tuples, checked as specs.
    """
    def tensors(specs: Iterable[TensorSpec | tuple[str, str, Sequence[int]]],
                ) -> list[dict[str, Any]]:
        return [(s if isinstance(s, TensorSpec) else TensorSpec(s[0], s[1], tuple(s[2])))
                .to_metadata() for s in specs]
    return {"name": name, "versions": list(versions), "platform": platform,
            "inputs": tensors(inputs), "outputs": tensors(outputs)}


def error_body(message: str) -> bytes:
    """The JSON error document `{"error": message}` of a failed HTTP request."""
    return json.dumps({"error": message}).encode()


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
            count, values = element_count(shape, ctx), _flatten(item["data"], ctx, 0)
            if len(values) != count:
                raise ProtocolError(f"{ctx}: {len(values)} values, shape {shape} needs {count}")
            data = values_array(values, numpy_dtype(datatype), ctx)
            tensors.append(InferTensor(name, datatype, tuple(shape), data.reshape(shape), params))
            continue
        if "data" in item:
            raise ProtocolError(f"{ctx}: has both 'data' and {BINARY_DATA_SIZE!r}")
        if type(size) is not int or not 0 <= size <= len(binary) - offset:
            raise ProtocolError(f"{ctx}: {BINARY_DATA_SIZE} {size!r} does not fit the"
                                f" {len(binary) - offset} bytes of binary data left")
        data = raw_array(datatype, shape, binary[offset:offset + size], ctx)
        tensors.append(InferTensor(name, datatype, tuple(shape), data, params))
        offset += size
    if offset != len(binary):
        raise ProtocolError(f"{len(binary) - offset} bytes of binary data belong to no {kind}")
    return tuple(tensors)


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


def _params(obj: Any, ctx: str) -> dict[str, ParamValue]:
    if obj is None:  # real servers send `"parameters": null` for none
        return {}
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
    value = doc.get(key)
    if value is None:  # absent, or JSON null
        return ""
    if not isinstance(value, str):
        raise ProtocolError(f"'{key}' must be a string")
    return value
