"""Device plans, precision choice, the executor on the CPU (and its CUDA path on CPU
stand-ins), and worker threads."""

from __future__ import annotations

import copy
import queue
from typing import Any

import numpy as np
import pytest
import torch

from oipwire.datatypes import TensorSpec
from sut.devicedata import INDEX_SPEC, SAMPLE_INDEX, DeviceSamples
from sut.errors import ConfigError, ModelLoadError
from sut.models import load_model
from sut.staging import PinnedPool
from sut.workers import (
    PRECISIONS,
    Executor,
    WorkerPlan,
    WorkerPool,
    place,
    plan_workers,
    resolve_precision,
)


@pytest.mark.parametrize("device, kwargs, cores, cuda, expect", [
    ("cpu", {}, 2, 0, WorkerPlan(("cpu", "cpu"), 1)),
    ("cpu", {}, 8, 0, WorkerPlan(("cpu", "cpu"), 4)),
    ("cpu", {}, 1, 0, WorkerPlan(("cpu",), 1)),
    ("auto", {}, 4, 0, WorkerPlan(("cpu", "cpu"), 2)),
    ("cpu", {"instances": 3, "threads": 2}, 8, 0, WorkerPlan(("cpu",) * 3, 2)),
    ("auto", {}, 8, 2, WorkerPlan(("cuda:0", "cuda:1"), 4)),
    ("cuda", {"instances": 2}, 8, 2, WorkerPlan(("cuda:0", "cuda:1", "cuda:0", "cuda:1"), 2)),
    ("cuda:1", {}, 8, 2, WorkerPlan(("cuda:1",), 8)),
    ("cuda", {"workers": 3}, 6, 2, WorkerPlan(("cuda:0", "cuda:1", "cuda:0"), 2)),
])
def test_plan_workers(device: str, kwargs: dict[str, int], cores: int, cuda: int,
                      expect: WorkerPlan) -> None:
    assert plan_workers(device, cores=cores, cuda_count=cuda, **kwargs) == expect


@pytest.mark.parametrize("device, kwargs, cuda, key", [
    ("cuda", {}, 0, "device"),
    ("cuda:2", {}, 2, "device"),
    ("tpu", {}, 0, "device"),
    ("cpu", {"instances": 3}, 0, "workers"),  # 3 workers on 2 cores
    ("cpu", {"instances": 1, "threads": 3}, 0, "threads"),
    ("cpu", {"instances": 1, "workers": 1}, 0, "workers"),
    ("cpu", {"threads": 0}, 0, "threads"),
])
def test_plan_workers_refuses(device: str, kwargs: dict[str, int], cuda: int, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        plan_workers(device, cores=2, cuda_count=cuda, **kwargs)
    assert caught.value.key == key


@pytest.mark.parametrize("requested, device, bf16, expect", [
    ("fp32", "cpu", False, "fp32"),
    ("fp16", "cpu", False, "fp32"),
    ("bf16", "cpu", False, "bf16"),
    ("fp16", "cuda", False, "fp16"),
    ("bf16", "cuda", True, "bf16"),
    ("bf16", "cuda", False, "fp32"),
])
def test_resolve_precision(requested: str, device: str, bf16: bool, expect: str) -> None:
    assert resolve_precision(requested, torch.device(device), bf16) == expect


def test_resolve_precision_refuses_unknown() -> None:
    with pytest.raises(ConfigError, match="precision"):
        resolve_precision("int8", torch.device("cpu"), False)


def _executor(name: str = "mlp", precision: str = "fp32") -> tuple[Executor, Any]:
    loaded = load_model(name, {}, 0)
    module = copy.deepcopy(loaded.module).to(PRECISIONS[precision])
    return Executor(module, torch.device("cpu"), precision, loaded.inputs, loaded.outputs), loaded


def test_executor_matches_direct_call_and_times_each_phase() -> None:
    executor, loaded = _executor()
    x = loaded.dataset.sample_inputs(np.arange(7))["input"]
    with torch.inference_mode():
        outputs, phases = executor.run({"input": [x[:3], x[3:]]}, 7)
        direct = loaded.module(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(outputs[0], direct, rtol=1e-5, atol=1e-6)
    assert set(phases) == {"h2d", "compute", "d2h"} and min(phases.values()) >= 0


def test_outputs_aliasing_the_inputs_stay_the_callers() -> None:
    spec = (TensorSpec("x", "FP32", (-1, 2)),)
    executor = Executor(torch.nn.Identity(), torch.device("cpu"), "fp32", spec, spec)
    with torch.inference_mode():
        first, _ = executor.run({"x": [np.ones((2, 2), np.float32)]}, 2)
        executor.run({"x": [np.zeros((2, 2), np.float32)]}, 2)
    assert first[0].tolist() == [[1, 1], [1, 1]]


class _Keeps(torch.nn.Module):
    """Returns its input, and keeps a copy of each input it was called with."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[torch.Tensor] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(x.clone())
        return x


def _on_its_cuda_path(executor: Executor) -> Executor:
    """`executor` (on the CPU) sent down its CUDA path, on the `cuda_on_cpu` stand-ins: a CPU
    device is never taken for CUDA, so the stream and events are made here."""
    executor._cuda = True
    executor._stream = torch.cuda.Stream(executor.device)
    executor._events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    return executor


@pytest.mark.usefixtures("cuda_on_cpu")
def test_a_serial_batch_of_indices_from_several_lent_blocks_reaches_the_forward_in_order(
        ) -> None:
    data = np.arange(40, dtype=np.float32).reshape(10, 4)  # the samples 'on the device'
    spec = (TensorSpec("x", "FP32", (-1, 4)),)
    model = _Keeps()
    executor = _on_its_cuda_path(Executor(model, torch.device("cpu"), "fp32", spec, spec,
                                          DeviceSamples.upload([data], torch.device("cpu"),
                                                               "fp32")))
    pool = PinnedPool([INDEX_SPEC], rows=4, limit=3, pinned=False)
    picks = ([7, 2], [9], [0, 0, 5])
    blocks = []
    for picked in picks:
        lent = pool.lend(len(picked))
        assert lent is not None
        lent.arrays[SAMPLE_INDEX][:] = picked
        blocks.append(lent)
    order = [i for picked in picks for i in picked]
    with torch.inference_mode():  # several requests: their blocks joined, as the service does
        outputs, phases = executor.run({SAMPLE_INDEX: [b.arrays[SAMPLE_INDEX] for b in blocks]},
                                       len(order))
        np.testing.assert_array_equal(model.seen[-1].numpy(), data[order])
        np.testing.assert_array_equal(outputs[0], data[order])
        assert set(phases) == {"h2d", "compute", "d2h"} and min(phases.values()) >= 0
        alone, _ = executor.run({}, 2, blocks[0])  # one request: its block read as it is
        np.testing.assert_array_equal(model.seen[-1].numpy(), data[[7, 2]])
        again, _ = executor.run({SAMPLE_INDEX: [np.array([3]), np.array([1, 8])]}, 3)
    np.testing.assert_array_equal(again[0], data[[3, 1, 8]])
    np.testing.assert_array_equal(outputs[0], data[order])  # the caller's, not a reused buffer
    assert alone[0].tolist() == data[[7, 2]].tolist()


@pytest.mark.usefixtures("cuda_on_cpu")
def test_a_serial_batch_of_rows_is_joined_in_one_reused_staging_buffer_in_order() -> None:
    spec = (TensorSpec("x", "FP32", (-1, 3)),)
    model = _Keeps()
    executor = _on_its_cuda_path(Executor(model, torch.device("cpu"), "fp32", spec, spec))
    parts = [np.full((2, 3), 1, np.float32), np.full((1, 3), 2, np.float32)]
    with torch.inference_mode():
        first, phases = executor.run({"x": parts}, 3)
        buffer = executor._staging["x"]
        second, _ = executor.run({"x": [np.full((2, 3), 7, np.float32)]}, 2)
    assert model.seen[0][:, 0].tolist() == [1, 1, 2]  # the requests' rows, in order
    assert first[0][:, 0].tolist() == [1, 1, 2]  # the caller's copy, not the buffer
    assert second[0].tolist() == [[7, 7, 7]] * 2
    assert executor._staging["x"] is buffer  # fewer rows: the same buffer, not a new one
    assert set(phases) == {"h2d", "compute", "d2h"}


def test_bf16_on_cpu_runs_in_bf16_and_returns_fp32() -> None:
    executor, loaded = _executor("mlp", "bf16")
    reference, _ = _executor("mlp", "fp32")
    x = loaded.dataset.sample_inputs(np.arange(4))["input"]
    with torch.inference_mode():
        low, _ = executor.run({"input": [x]}, 4)
        full, _ = reference.run({"input": [x]}, 4)
    assert low[0].dtype == np.float32
    assert not np.array_equal(low[0], full[0])
    np.testing.assert_allclose(low[0], full[0], atol=0.05)


def test_pool_threads_take_batches_in_inference_mode_with_their_thread_count() -> None:
    executor, _ = _executor()
    seen: queue.Queue[tuple[str, int, bool]] = queue.Queue()
    batches: queue.Queue[str | None] = queue.Queue()
    for item in ("a", "b", None, None):  # None ends a worker, as a closed batcher does
        batches.put(item)

    def handle(ex: Executor, batch: Any) -> None:
        seen.put((batch, torch.get_num_threads(), torch.is_inference_mode_enabled()))

    pool = WorkerPool([executor, executor], 1, batches.get, handle)
    pool.start()
    pool.join()
    assert sorted(seen.get_nowait() for _ in range(2)) == [("a", 1, True), ("b", 1, True)]
    assert seen.empty()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_executor_pins_and_matches_cpu() -> None:
    loaded = load_model("mlp", {}, 0)
    gpu = Executor(copy.deepcopy(loaded.module).cuda(), torch.device("cuda:0"),
                   "fp32", loaded.inputs, loaded.outputs)
    x = loaded.dataset.sample_inputs(np.arange(5))["input"]
    with torch.inference_mode():
        out, phases = gpu.run({"input": [x]}, 5)
        direct = loaded.module(torch.from_numpy(x)).numpy()
    assert gpu._staging["input"].is_pinned()
    np.testing.assert_allclose(out[0], direct, rtol=1e-4, atol=1e-5)
    assert min(phases.values()) >= 0


class Fp32Only(torch.nn.Module):
    """Refuses anything but fp32 inputs, as some exported models do."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"fp32 only, got {x.dtype}")
        return x


def test_place_falls_back_to_fp32_when_reduced_precision_fails() -> None:
    spec = (TensorSpec("x", "FP32", (-1, 2)),)
    sample = {"x": np.ones((1, 2), np.float32)}
    placed = place(Fp32Only(), ["cpu"], "bf16", spec, spec, sample)
    assert placed.precision == "fp32" and "bf16 failed" in placed.note
    assert placed.first_inference_ns > 0
    kept = place(torch.nn.Identity(), ["cpu"], "bf16", spec, spec, sample)
    assert (kept.precision, kept.note) == ("bf16", "")
    with pytest.raises(ModelLoadError, match="first inference"):
        place(torch.nn.Linear(3, 1), ["cpu"], "fp32", spec, spec, sample)  # wrong width


class WritesItsInput(torch.nn.Module):
    """Adds one to its input in place, as a careless user model might."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.add_(1)


def test_cpu_inputs_are_copied_so_a_model_cannot_write_the_callers_arrays() -> None:
    spec = (TensorSpec("x", "FP32", (-1, 2)),)
    executor = Executor(WritesItsInput(), torch.device("cpu"), "fp32", spec, spec)
    mine = np.zeros((2, 2), np.float32)
    with torch.inference_mode():
        out, _ = executor.run({"x": [mine]}, 2)
    assert out[0].tolist() == [[1, 1], [1, 1]] and not mine.any()
