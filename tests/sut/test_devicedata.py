"""Samples that start on the device: auto's decision, the option, the gather by index and
the index buffers, with CPU tensors standing in for the GPU's; the service on the CPU says
its samples start on the host."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

from oipwire.datatypes import TensorSpec, numpy_dtype
from sut.devicedata import (
    AUTO_SHARE,
    INDEX_SPEC,
    SAMPLE_INDEX,
    DeviceSamples,
    IndexBuffers,
    dataset_bytes,
    decide,
    index_rows,
    place_samples,
)
from sut.errors import ConfigError, InvalidInput
from sut.forward import Forward
from sut.options import parse_options
from sut.service import InferenceService, build_service
from sut.staging import PinnedPool, block_dtype
from tests.sut.conftest import run

MIB = 1 << 20
CPU = torch.device("cpu")


def _decide(asked: bool | None, cuda: bool = True, in_process: bool = True,
            fixed: bool = True, need: int = MIB, free: int = 8 * MIB) -> tuple[bool, str]:
    d = decide(asked, cuda=cuda, in_process=in_process, fixed_shapes=fixed, dataset_bytes=need,
               free_bytes=free)
    return d.on, d.reason


@pytest.mark.parametrize(("kwargs", "on", "says"), [
    ({"asked": None}, True, "auto: 1.0 MiB <= 1/8 of 8 MiB free"),
    ({"asked": None, "need": MIB + 1}, False, "auto: 1.0 MiB > 1/8 of 8 MiB free"),
    ({"asked": True, "need": 4 * MIB}, True, "start_from_device=true"),
    ({"asked": False}, False, "start_from_device=false"),
    ({"asked": True, "cuda": False}, False, "on the CPU samples start on the host"),
    ({"asked": None, "cuda": False}, False, "on the CPU"),
    ({"asked": True, "in_process": False}, False, "HTTP/gRPC"),
    ({"asked": None, "fixed": False}, False, "variable shape"),
    ({"asked": True, "fixed": False}, False, "variable shape"),
])
def test_the_decision_is_a_function_of_device_caller_shapes_and_sizes(
        kwargs: dict[str, Any], on: bool, says: str) -> None:
    got_on, reason = _decide(**kwargs)
    assert got_on is on and says in reason
    assert AUTO_SHARE == 8


def test_on_the_cpu_nothing_is_read_or_placed() -> None:
    def read_all() -> dict[str, np.ndarray]:
        raise AssertionError("the dataset is read only when it may go to the device")

    decision, placed = place_samples(True, ["cpu"], [INDEX_SPEC], read_all, "fp32",
                                     in_process=True)
    assert placed is None and not decision.on and "CPU" in decision.reason


@pytest.mark.parametrize(("inputs", "says"), [
    ({SAMPLE_INDEX: np.array([0, 9])}, None),
    ({SAMPLE_INDEX: np.array([10])}, r"in \[0, 10\)"),
    ({SAMPLE_INDEX: np.array([-1])}, r"in \[0, 10\)"),
    ({SAMPLE_INDEX: np.array([1], dtype=np.int32)}, "int64 indices"),
    ({SAMPLE_INDEX: np.zeros((2, 1), dtype=np.int64)}, "int64 indices"),
    ({SAMPLE_INDEX: np.zeros(0, dtype=np.int64)}, "int64 indices"),
    ({"input": np.zeros((1, 256), dtype=np.float32)}, "samples start on the device"),
    ({SAMPLE_INDEX: np.arange(5)}, "5 rows exceed max_batch_size=4"),
])
def test_a_request_of_indices_is_checked_before_it_reaches_the_device(
        inputs: dict[str, np.ndarray], says: str | None) -> None:
    if says is None:
        assert index_rows(inputs, 4, 10) == 2
        return
    with pytest.raises(InvalidInput, match=says):
        index_rows(inputs, 4, 10)


def test_the_option_is_auto_by_default_and_parses_flags() -> None:
    assert parse_options({}).start_from_device is None
    assert [parse_options({"start_from_device": w}).start_from_device
            for w in ("auto", "AUTO", "true", "on", "false", "0")] == [
        None, None, True, True, False, False]
    with pytest.raises(ConfigError, match="^start_from_device: want true or false"):
        parse_options({"start_from_device": "sometimes"})


def test_the_dataset_is_counted_and_kept_at_the_models_precision() -> None:
    images = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    ids = np.arange(10, dtype=np.int64).reshape(5, 2)
    assert dataset_bytes([images, ids], "bf16") == 24 * 2 + 10 * 8
    assert dataset_bytes([images], "fp32") == 24 * 4
    assert dataset_bytes([images.astype(np.float64)], "fp32") == 24 * 4  # as the forward gets
    samples = DeviceSamples.upload([images, ids], CPU, "bf16")
    assert samples.dtypes == (torch.bfloat16, torch.int64)
    assert samples.nbytes == 24 * 2 + 10 * 8 and samples.size == 2


class _Receives(torch.nn.Module):
    """Returns its input as it is, and keeps the dtype it was called with."""

    def __init__(self) -> None:
        super().__init__()
        self.dtypes: list[torch.dtype] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.dtypes.append(x.dtype)
        return x


@pytest.mark.parametrize(("datatype", "precision"), [
    ("FP64", "fp32"), ("FP16", "fp32"), ("FP32", "bf16"), ("FP64", "fp16"), ("INT64", "fp32"),
])
def test_the_device_copy_and_a_lent_block_hold_what_the_forward_receives(
        datatype: str, precision: str) -> None:
    spec = TensorSpec("x", datatype, (-1, 3))
    data = np.arange(12).reshape(4, 3).astype(numpy_dtype(datatype))
    on_device = DeviceSamples.upload([data], CPU, precision).dtypes[0]
    lent = PinnedPool([spec], 4, limit=1, pinned=False, precision=precision).lend(4)
    assert lent is not None
    model = _Receives()
    Forward(model, precision, (TensorSpec("y", datatype, (-1, 3)),))([torch.from_numpy(data)])
    assert on_device == lent.tensors["x"].dtype == model.dtypes[0] == block_dtype(
        torch.from_numpy(data).dtype, precision)
    assert dataset_bytes([data], precision) == 12 * lent.tensors["x"].element_size()


def test_gather_writes_the_rows_in_place_into_the_first_rows_of_each_target() -> None:
    images = np.random.default_rng(0).random((50, 3, 4, 4), dtype=np.float32)
    ids = np.arange(100, dtype=np.int64).reshape(50, 2)
    samples = DeviceSamples.upload([images, ids], CPU, "fp32")
    static = [torch.full((8, 3, 4, 4), -1.0), torch.full((8, 2), -1, dtype=torch.int64)]
    assert samples.fits(static) and not samples.fits([static[0]])
    assert not samples.fits([static[0].to(torch.bfloat16), static[1]])
    index = torch.tensor([49, 0, 7, 7, 13])
    views = samples.gather(index, static)
    for view, target, data in zip(views, static, (images, ids), strict=True):
        assert view.data_ptr() == target.data_ptr() and view.shape[0] == 5  # no new memory
        np.testing.assert_array_equal(view.numpy(), data[index.numpy()])
    assert float(static[0][5:].max()) == -1.0  # rows past the batch untouched
    full = [torch.empty(5, 3, 4, 4), torch.empty(5, 2, dtype=torch.int64)]
    assert samples.gather(index, full)[0].data_ptr() == full[0].data_ptr()
    for got, data in zip(samples.select(index), (images, ids), strict=True):
        np.testing.assert_array_equal(got.numpy(), data[index.numpy()])


def test_index_buffers_join_requests_read_a_lent_block_as_it_is_and_are_reused() -> None:
    buffers = IndexBuffers(CPU, pinned=False)
    host = buffers.join([np.array([3]), np.array([9, 4, 0])], 4)
    joined = buffers.send(host)
    assert joined.tolist() == [3, 9, 4, 0] and joined.dtype == torch.int64
    pointer = joined.data_ptr()
    pool = PinnedPool([INDEX_SPEC], rows=8, limit=2, pinned=False)
    lent = pool.lend(4)
    assert lent is not None and lent.arrays[SAMPLE_INDEX].shape == (4,)
    lent.arrays[SAMPLE_INDEX][:] = [5, 6, 7, 8]
    read = buffers.join([lent.arrays[SAMPLE_INDEX]], 4, lent)
    assert read.data_ptr() == lent.tensors[SAMPLE_INDEX].data_ptr()  # the block as it is
    again = buffers.send(read)
    assert again.tolist() == [5, 6, 7, 8] and again.data_ptr() == pointer  # kept
    one = buffers.join([np.array([1])], 1)
    assert one.data_ptr() == host.data_ptr()  # the host buffer reused too
    assert buffers.send(one).data_ptr() == pointer
    pool.give_back(lent)
    back = pool.lend(4)
    assert back is not None and back.block == lent.block  # the same block, lent again


def test_on_the_cpu_the_service_keeps_samples_on_the_host_and_says_why() -> None:
    async def body() -> tuple[dict[str, Any], bool, Any]:
        service: InferenceService = build_service(
            "mlp", {"start_from_device": "true", "warmup": "0"})
        await service.start(in_process=True)
        try:
            return service.describe(), service.samples_on_device, service.lend_indices(4)
        finally:
            await service.stop()

    info, on, lent = run(body())
    assert not on and lent is None
    assert info["samples"] == "host"
    assert info["samples_note"] == "on the CPU samples start on the host"
