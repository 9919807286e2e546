"""The wire datatypes: the one table of datatype -> numpy dtype, and the tensor spec.

    BOOL UINT8 UINT16 UINT32 UINT64 INT8 INT16 INT32 INT64 FP16 FP32 FP64 BYTES

Fixed-size datatypes travel little-endian and row-major; BYTES elements are Python `bytes`
in an `object` array. BF16 is valid on the wire but unsupported here (numpy has no
bfloat16). A `TensorSpec` is one input or output as model metadata declares it, with -1
for a variable dimension; both the server (what it serves) and the client (what it sends)
use it. Bad names, datatypes and shapes raise `ProtocolError`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from oipwire.errors import ProtocolError

__all__ = ["DATATYPES", "MAX_DIMS", "TensorSpec", "datatype_of", "element_count", "numpy_dtype"]

MAX_DIMS = 32
"""Most dimensions a tensor may have."""
_MAX_ELEMENTS = 2**59  # numpy needs elements * 8 bytes to fit an intp, even for empty tensors

_DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(code) for name, code in [
        ("BOOL", "?"), ("UINT8", "<u1"), ("UINT16", "<u2"), ("UINT32", "<u4"), ("UINT64", "<u8"),
        ("INT8", "<i1"), ("INT16", "<i2"), ("INT32", "<i4"), ("INT64", "<i8"),
        ("FP16", "<f2"), ("FP32", "<f4"), ("FP64", "<f8"), ("BYTES", "O"),
    ]
}
DATATYPES = tuple(_DTYPES)
"""Supported datatypes; BF16 is valid on the wire but unsupported (numpy has no bfloat16)."""


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


def element_count(shape: Sequence[Any], what: str) -> int:
    """Elements of a concrete tensor shape (at most MAX_DIMS non-negative ints); `what`
    names the tensor in the error."""
    if len(shape) > MAX_DIMS or any(type(d) is not int or d < 0 for d in shape):
        raise ProtocolError(f"{what}: shape {list(shape)} must be at most {MAX_DIMS}"
                            " non-negative integers")
    if math.prod(max(d, 1) for d in shape) > _MAX_ELEMENTS:
        raise ProtocolError(f"{what}: shape {list(shape)} is too large")
    return math.prod(shape)


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One input or output of a model, as its metadata declares it; -1 in `shape` marks a
    variable dimension (a leading -1 is the batch dimension). Checked when built."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise ProtocolError(f"tensor name {self.name!r} is not a string")
        numpy_dtype(self.datatype)
        shape = tuple(self.shape)
        if any(isinstance(d, bool) or not isinstance(d, int | np.integer) or d < -1
               for d in shape):
            raise ProtocolError(f"tensor {self.name!r}: bad metadata shape {list(shape)}")
        object.__setattr__(self, "shape", tuple(int(d) for d in shape))

    @classmethod
    def from_metadata(cls, entry: Mapping[str, Any]) -> TensorSpec:
        """From one entry of a model metadata document's `inputs` or `outputs` (the JSON
        object, or the same keys read from the gRPC `TensorMetadata`)."""
        try:
            name, datatype, shape = entry["name"], entry["datatype"], entry["shape"]
        except (KeyError, TypeError):
            raise ProtocolError(f"metadata tensor {entry!r}: needs 'name', 'datatype' and"
                                " 'shape'") from None
        if not isinstance(shape, Sequence) or isinstance(shape, str | bytes):
            raise ProtocolError(f"metadata tensor {name!r}: 'shape' must be a list")
        return cls(name, datatype, tuple(shape))

    def to_metadata(self) -> dict[str, Any]:
        """The metadata entry: `{"name", "datatype", "shape"}` (JSON, or gRPC kwargs)."""
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}
