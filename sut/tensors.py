"""Tensor specs and the datatype names of the Open Inference Protocol (OIP)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["DATATYPES", "TensorSpec", "numpy_dtype", "oip_datatype", "torch_dtype"]

#: OIP datatype -> (numpy dtype, torch dtype)
DATATYPES: dict[str, tuple[np.dtype, torch.dtype]] = {
    "BOOL": (np.dtype(np.bool_), torch.bool),
    "UINT8": (np.dtype(np.uint8), torch.uint8),
    "INT8": (np.dtype(np.int8), torch.int8),
    "INT16": (np.dtype(np.int16), torch.int16),
    "INT32": (np.dtype(np.int32), torch.int32),
    "INT64": (np.dtype(np.int64), torch.int64),
    "FP16": (np.dtype(np.float16), torch.float16),
    "FP32": (np.dtype(np.float32), torch.float32),
    "FP64": (np.dtype(np.float64), torch.float64),
}


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One named tensor of a model; -1 in `shape` marks the batch dimension."""

    name: str
    datatype: str
    shape: tuple[int, ...]


def numpy_dtype(datatype: str) -> np.dtype:
    """The numpy dtype of an OIP datatype name."""
    return DATATYPES[datatype][0]


def torch_dtype(datatype: str) -> torch.dtype:
    """The torch dtype of an OIP datatype name."""
    return DATATYPES[datatype][1]


def oip_datatype(dtype: np.dtype | torch.dtype) -> str:
    """The OIP datatype name of a numpy or torch dtype; KeyError when it has none."""
    index = 1 if isinstance(dtype, torch.dtype) else 0
    for name, pair in DATATYPES.items():
        if pair[index] == dtype:
            return name
    raise KeyError(f"no OIP datatype for {dtype}")
