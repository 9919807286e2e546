"""sut.tensors: the torch side is built on oipwire's one datatype table."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import oipwire
from sut.tensors import TORCH_DTYPES, oip_datatype, torch_dtype


def test_torch_dtypes_agree_with_the_wire_table() -> None:
    assert set(TORCH_DTYPES) <= set(oipwire.DATATYPES)
    for name, dtype in TORCH_DTYPES.items():
        assert torch_dtype(name) is dtype and oip_datatype(dtype) == name
        numpy_twin = torch.empty(0, dtype=dtype).numpy().dtype
        assert numpy_twin == oipwire.numpy_dtype(name) and oip_datatype(numpy_twin) == name


def test_datatypes_a_model_may_not_use() -> None:
    for dtype in (torch.complex64, torch.bfloat16, np.dtype(object), np.dtype("<u2")):
        with pytest.raises(KeyError):
            oip_datatype(dtype)
    with pytest.raises(KeyError):
        torch_dtype("BYTES")
