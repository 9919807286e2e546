"""The torch side of the wire datatypes: which torch dtype holds each one a model may use.

The datatype names and their numpy dtypes are `oipwire.datatypes` (the one table); this
adds only the torch dtype of the ones a served model may take or give. UINT16/32/64 and
BYTES have none here.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import torch

from oipwire.datatypes import datatype_of

__all__ = ["TORCH_DTYPES", "oip_datatype", "torch_dtype"]

TORCH_DTYPES = MappingProxyType({
    "BOOL": torch.bool, "UINT8": torch.uint8, "INT8": torch.int8, "INT16": torch.int16,
    "INT32": torch.int32, "INT64": torch.int64, "FP16": torch.float16, "FP32": torch.float32,
    "FP64": torch.float64,
})
"""Wire datatype (an `oipwire.DATATYPES` name) -> torch dtype."""


def torch_dtype(datatype: str) -> torch.dtype:
    """The torch dtype of a wire datatype; KeyError when a model may not use it."""
    return TORCH_DTYPES[datatype]


def oip_datatype(dtype: np.dtype | torch.dtype) -> str:
    """The wire datatype of a torch or numpy dtype; KeyError when a model may not use it."""
    if isinstance(dtype, torch.dtype):
        found = next((name for name, known in TORCH_DTYPES.items() if known == dtype), None)
    else:
        try:
            found = datatype_of(np.dtype(dtype))
        except ValueError:
            found = None
    if found is None or found not in TORCH_DTYPES:
        raise KeyError(f"no OIP datatype for {dtype}")
    return found
