"""Lent blocks in the model's precision: their dtypes, the conversion, mixed batches."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from oipwire.datatypes import TensorSpec
from sut.staging import PinnedPool, block_dtype, held_apart, request_parts, to_block

SPECS = (TensorSpec("image", "FP32", (-1, 3, 4)), TensorSpec("ids", "INT64", (-1, 5)))


@pytest.mark.parametrize("dtype, precision, held", [
    (torch.float32, "fp32", torch.float32),
    (torch.float32, "bf16", torch.bfloat16),
    (torch.float32, "fp16", torch.float16),
    (torch.float64, "bf16", torch.bfloat16),
    (torch.float64, "fp32", torch.float32),  # what the forward receives at fp32
    (torch.float16, "fp32", torch.float32),
    (torch.int64, "bf16", torch.int64),  # integers never change
    (torch.uint8, "fp16", torch.uint8),
])
def test_block_dtype(dtype: torch.dtype, precision: str, held: torch.dtype) -> None:
    assert block_dtype(dtype, precision) == held


@pytest.mark.parametrize("precision, numpy_dtype, torch_dtype", [
    ("fp32", np.float32, torch.float32),
    ("bf16", np.uint16, torch.bfloat16),
    ("fp16", np.float16, torch.float16),
])
def test_a_pool_lends_floating_inputs_in_the_precision_and_others_as_they_are(
        precision: str, numpy_dtype: type, torch_dtype: torch.dtype) -> None:
    pool = PinnedPool(SPECS, 8, limit=1, pinned=False, precision=precision)
    lent = pool.lend(5)
    assert lent is not None
    assert lent.arrays["image"].dtype == numpy_dtype and lent.arrays["image"].shape == (5, 3, 4)
    assert lent.tensors["image"].dtype == torch_dtype
    assert lent.arrays["ids"].dtype == np.int64 and lent.tensors["ids"].dtype == torch.int64
    # the numpy array is the tensor's memory: what is gathered into one is what is sent
    assert lent.arrays["image"].ctypes.data == lent.tensors["image"].data_ptr()
    assert dict(lent.spec_dtypes) == ({} if precision == "fp32" else {"image": torch.float32})
    assert pool.dtypes == {"image": torch_dtype, "ids": torch.int64}


def test_to_block_is_the_torch_cast_and_keeps_arrays_already_in_the_dtype() -> None:
    values = np.random.default_rng(0).standard_normal((6, 3, 4)).astype(np.float32)
    bits = to_block(values, torch.bfloat16)
    assert bits.dtype == np.uint16 and bits.shape == values.shape
    as_bf16 = torch.from_numpy(bits).view(torch.bfloat16)
    assert torch.equal(as_bf16, torch.from_numpy(values).to(torch.bfloat16))
    assert to_block(values, torch.float32) is values  # fp32: no copy at all
    halves = to_block(values, torch.float16)
    assert halves.dtype == np.float16 and np.array_equal(halves, values.astype(np.float16))


def test_a_bf16_block_gathered_from_converted_rows_holds_the_cast_values() -> None:
    pool = PinnedPool(SPECS[:1], 8, limit=1, pinned=False, precision="bf16")
    data = np.random.default_rng(1).standard_normal((10, 3, 4)).astype(np.float32)
    lent = pool.lend(4)
    assert lent is not None
    picked = np.array([9, 0, 3, 3])
    np.take(to_block(data, torch.bfloat16), picked, axis=0, out=lent.arrays["image"],
            mode="clip")
    assert torch.equal(lent.tensors["image"], torch.from_numpy(data[picked]).to(torch.bfloat16))
    widened = lent.in_spec_dtype("image")  # exact: every bf16 value is an fp32 value
    assert widened.dtype == np.float32
    assert torch.equal(torch.from_numpy(widened).to(torch.bfloat16), lent.tensors["image"])


def test_a_batch_mixing_a_reduced_lent_block_with_plain_rows_joins_in_the_spec_dtype() -> None:
    pool = PinnedPool(SPECS, 8, limit=2, pinned=False, precision="bf16")
    lent = pool.lend(2)
    assert lent is not None
    lent.arrays["image"][...] = to_block(np.full((2, 3, 4), 1.5, np.float32), torch.bfloat16)
    lent.arrays["ids"][...] = 7
    plain = {"image": np.full((1, 3, 4), 2.25, np.float32), "ids": np.zeros((1, 5), np.int64)}
    requests = [SimpleNamespace(inputs=plain, lent=None),
                SimpleNamespace(inputs=lent.arrays, lent=lent)]
    image = request_parts(requests, "image", held_apart(SPECS, "bf16"))
    assert [p.dtype for p in image] == [np.float32, np.float32]
    assert np.concatenate(image).tolist() == [[[2.25] * 4] * 3] + [[[1.5] * 4] * 3] * 2
    ids = request_parts(requests, "ids", held_apart(SPECS, "bf16"))
    assert ids[1] is lent.arrays["ids"]  # held as its spec says: not copied
    fp32 = PinnedPool(SPECS, 8, limit=1, pinned=False).lend(2)
    assert fp32 is not None
    alike = [SimpleNamespace(inputs=plain, lent=None),
             SimpleNamespace(inputs=fp32.arrays, lent=fp32)]
    assert held_apart(SPECS, "fp32") == {}
    assert request_parts(alike, "image", {})[1] is fp32.arrays["image"]  # fp32: as it is


def test_an_fp64_input_at_fp32_is_lent_as_fp32_and_a_mixed_batch_joins_in_fp64() -> None:
    specs = (TensorSpec("x", "FP64", (-1, 3)), TensorSpec("ids", "INT64", (-1, 5)))
    assert held_apart(specs, "fp32") == {"x": torch.float64}
    pool = PinnedPool(specs, 4, limit=1, pinned=False, precision="fp32")
    assert pool.dtypes == {"x": torch.float32, "ids": torch.int64}
    lent = pool.lend(2)
    assert lent is not None and lent.arrays["x"].dtype == np.float32
    values = np.array([[0.1, 1 / 3, 2.5]] * 2)  # float64, most not fp32 values
    lent.arrays["x"][...] = to_block(values, torch.float32)
    plain = {"x": np.full((1, 3), 0.7), "ids": np.zeros((1, 5), np.int64)}
    requests = [SimpleNamespace(inputs=plain, lent=None),
                SimpleNamespace(inputs=lent.arrays, lent=lent)]
    parts = request_parts(requests, "x", held_apart(specs, "fp32"))
    assert [p.dtype for p in parts] == [np.float64, np.float64]
    # the lent rows come back as the fp32 values the forward would have cast them to
    assert np.array_equal(parts[1], values.astype(np.float32).astype(np.float64))
