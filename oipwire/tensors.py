"""A tensor on the wire (`InferTensor`), and its two encodings shared by HTTP and gRPC.

Raw bytes (`tensor_from_raw` / `tensor_to_raw`): little-endian, row-major; BYTES elements
are each prefixed by a 4-byte little-endian length. These are the HTTP binary tensor data
and the gRPC `raw_*_contents`. Typed values (`values_array`): a flat list of Python values
(JSON `data`, gRPC typed `contents`) into an array, refusing lossy ones. Tensors decoded
from raw bytes are read-only views of them. Malformed input raises `ProtocolError`.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from oipwire.datatypes import datatype_of, element_count, numpy_dtype
from oipwire.errors import ProtocolError

__all__ = ["InferTensor", "ParamValue", "raw_array", "tensor_from_raw", "tensor_to_raw",
           "values_array"]

ParamValue = bool | int | float | str
"""A parameter value: JSON string/number/boolean; gRPC `InferParameter`."""

_LEN = struct.Struct("<I")
_NO_PARAMS: Mapping[str, ParamValue] = MappingProxyType({})


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
            array = values_array(array.ravel().tolist(), numpy_dtype("BYTES"),
                                 repr(name)).reshape(array.shape)
        return cls(name, datatype_of(array.dtype), array.shape, array, dict(parameters))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, InferTensor):
            return NotImplemented
        a, b = self.data, other.data
        return ((self.name, self.datatype, self.shape, self.parameters)
                == (other.name, other.datatype, other.shape, other.parameters)
                and a.dtype == b.dtype
                and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f")))


def tensor_from_raw(name: str, datatype: str, shape: Sequence[int], raw: bytes | memoryview,
                    parameters: Mapping[str, ParamValue] = _NO_PARAMS) -> InferTensor:
    """A tensor from raw little-endian row-major bytes (`raw_*_contents`, HTTP binary data)."""
    data = raw_array(datatype, shape, raw, f"tensor {name!r}")
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


def values_array(values: list[Any], dtype: np.dtype[Any], what: str) -> np.ndarray[Any, Any]:
    """Typed values (JSON data or gRPC contents) into a flat array, refusing lossy ones.

    BYTES takes str (encoded UTF-8) or bytes; BOOL only bools; integers only ints in range;
    floats ints or floats. `what` names the tensor in the error.
    """
    types, kind = set(map(type, values)), dtype.kind
    if kind == "O":
        if not types <= {str, bytes}:
            raise ProtocolError(f"{what}: BYTES values must be strings (JSON) or bytes")
        out = np.empty(len(values), dtype=object)
        try:
            out[:] = [v.encode() if isinstance(v, str) else v for v in values]
        except UnicodeEncodeError:
            raise ProtocolError(f"{what}: a BYTES string is not valid Unicode") from None
        return out
    allowed = {bool} if kind == "b" else {int} if kind in "iu" else {int, float}
    if not types <= allowed:
        names = sorted(t.__name__ for t in types - allowed)
        raise ProtocolError(f"{what}: {', '.join(names)} values do not fit {dtype.name}")
    if kind in "iu" and values:
        info = np.iinfo(dtype)
        if min(values) < info.min or max(values) > info.max:
            raise ProtocolError(f"{what}: values out of range for {dtype.name}")
    try:
        with np.errstate(over="raise"):
            return np.array(values, dtype=dtype)
    except (OverflowError, FloatingPointError):
        raise ProtocolError(f"{what}: values out of range for {dtype.name}") from None


def raw_array(datatype: str, shape: Sequence[int], raw: bytes | memoryview, what: str,
              ) -> np.ndarray[Any, Any]:
    """The array of raw tensor bytes (a read-only view; BYTES: an object array of copies);
    `what` names the tensor in the error."""
    ctx = what
    dtype, count = numpy_dtype(datatype), element_count(shape, ctx)
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
