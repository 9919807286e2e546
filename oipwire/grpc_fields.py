"""Which protobuf field of the gRPC messages carries what: pure functions, no protobuf import.

Wiring (a gRPC client or server) copies message fields into these and back out:

    raw_input_contents / raw_output_contents   oipwire.tensors.tensor_from_raw / tensor_to_raw
    InferTensorContents.<contents_field(dt)>   tensor_from_contents / tensor_to_contents
    InferParameter.<parameter_field(value)>    setattr(msg, parameter_field(value), value)

`parameter_field` also decides which values a parameter may hold at all, so the REST codec
checks parameters with it too. Malformed input raises `ProtocolError`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from oipwire.datatypes import element_count, numpy_dtype
from oipwire.errors import ProtocolError
from oipwire.tensors import InferTensor, ParamValue, values_array

__all__ = ["contents_field", "parameter_field", "tensor_from_contents", "tensor_to_contents"]

_INT64, _UINT64_END = (-(2**63), 2**63), 2**64
_NO_PARAMS: Mapping[str, ParamValue] = MappingProxyType({})
_CONTENTS = {"BOOL": "bool_contents", "INT64": "int64_contents", "UINT64": "uint64_contents",
             "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents",
             **dict.fromkeys(("INT8", "INT16", "INT32"), "int_contents"),
             **dict.fromkeys(("UINT8", "UINT16", "UINT32"), "uint_contents")}


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
    dtype = numpy_dtype(datatype)
    count, field_name = element_count(shape, ctx), contents_field(datatype)
    items = list(values)
    if len(items) != count:
        raise ProtocolError(f"{ctx}: {len(items)} values in {field_name}, shape {list(shape)}"
                            f" needs {count}")
    return InferTensor(name, datatype, tuple(shape),
                       values_array(items, dtype, ctx).reshape(tuple(shape)), dict(parameters))


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
