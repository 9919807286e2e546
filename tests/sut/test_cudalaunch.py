"""The CUDA launcher's logic on the CPU: batches of sample indices gathered into a graph
bucket's static inputs (or the slot's eager inputs) answer as rows from the host do.

CPU stand-ins replace the CUDA streams, events and pinned memory (`cuda_on_cpu`, in
conftest), and a graph that runs the forward eagerly into its static outputs replaces a
captured one; what runs for real is the launcher's choice of bucket and targets, the index
buffers and the gather. The CUDA tests (`test_cuda.py`) run the same on a GPU.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import pytest
import torch

from sut.batcher import Batch, Request
from sut.cudalaunch import CudaLauncher
from sut.devicedata import SAMPLE_INDEX, DeviceSamples
from sut.forward import Forward
from sut.graphs import GraphSet, buckets_up_to
from sut.models import LoadedModel, load_model
from sut.staging import PinnedPool, to_block

CPU = torch.device("cpu")


class _EagerGraph:
    """Stands in for a captured graph: replay runs the forward on the static inputs."""

    def __init__(self, forward: Forward, inputs: list[torch.Tensor],
                 outputs: list[torch.Tensor]) -> None:
        self._forward, self._inputs, self._outputs = forward, inputs, outputs

    def replay(self) -> None:
        for out, got in zip(self._outputs, self._forward(self._inputs), strict=True):
            out.copy_(got)


def _graphs(forward: Forward, dtypes: Sequence[torch.dtype], rows: Sequence[int],
            max_rows: int) -> GraphSet:
    buckets = buckets_up_to(max_rows)
    inputs = {b: [torch.zeros((b, *row), dtype=d) for row, d in zip([rows], dtypes, strict=True)]
              for b in buckets}
    outputs = {b: [torch.zeros(b, 10)] for b in buckets}
    graphs = {b: _EagerGraph(forward, inputs[b], outputs[b]) for b in buckets}
    return GraphSet(buckets, inputs, outputs, graphs)  # type: ignore[arg-type]


def _batch(requests: list[dict[str, np.ndarray]]) -> Batch:
    made = [Request(inputs, len(next(iter(inputs.values()))), lambda _: None, 0, 0, None, i)
            for i, inputs in enumerate(requests)]
    return Batch(made, sum(r.rows for r in made), 0)


def _mlp(precision: str) -> tuple[Forward, LoadedModel]:
    loaded = load_model("mlp", {}, 0)
    module = copy.deepcopy(loaded.module).to(dtype=torch.bfloat16 if precision == "bf16"
                                             else torch.float32)
    return Forward(module, precision, loaded.outputs), loaded


def _launchers(graphs: bool, precision: str) -> tuple[CudaLauncher, CudaLauncher, LoadedModel]:
    """A launcher fed indices (samples on the 'device') and one fed rows, alike otherwise."""
    forward, loaded = _mlp(precision)
    every = loaded.dataset.sample_inputs(np.arange(loaded.dataset.size))["input"]
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    samples = DeviceSamples.upload([every], CPU, precision)
    indexed = CudaLauncher(forward, CPU, loaded.inputs, loaded.outputs, 3,
                           [_graphs(forward, [dtype], (256,), 8) for _ in range(3)]
                           if graphs else (), samples)
    rows = CudaLauncher(forward, CPU, loaded.inputs, loaded.outputs, 3,
                        [_graphs(forward, [torch.float32], (256,), 8) for _ in range(3)]
                        if graphs else ())
    return indexed, rows, loaded


@pytest.mark.usefixtures("cuda_on_cpu")
@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_batch_of_indices_answers_as_the_same_rows_from_the_host(graphs: bool,
                                                                   precision: str) -> None:
    indexed, rows, loaded = _launchers(graphs, precision)
    assert indexed._graph_gather is graphs
    batches = [[np.array([5, 900, 3])], [np.array([7]), np.array([1, 2])], [np.arange(8) * 3],
               [np.array([1023])]] * 2
    for i, parts in enumerate(batches):  # one request or several, every bucket size
        slot = i % 3
        indexed.launch(slot, _batch([{SAMPLE_INDEX: p} for p in parts]))
        rows.launch(slot, _batch([loaded.dataset.sample_inputs(p) for p in parts]))
        got, phases = indexed.finish(slot)
        want, _ = rows.finish(slot)
        assert set(phases) == {"h2d", "compute", "d2h"} and got[0].shape == want[0].shape
        scale = max(1.0, float(np.abs(want[0]).max()))
        assert float(np.abs(got[0] - want[0]).max()) <= (0.0 if precision == "fp32"
                                                          else 0.1 * scale)
    if graphs:  # the gather wrote the bucket's static inputs, at the samples' dtype
        static = indexed.graphs[0].static_inputs(4)[0]
        first = torch.from_numpy(loaded.dataset.sample_inputs(np.array([5, 900, 3]))["input"])
        assert torch.equal(static[:3], first.to(static.dtype))
    else:
        assert all(s.dev_in[0] is not None for s in indexed._slots)


@pytest.mark.usefixtures("cuda_on_cpu")
@pytest.mark.parametrize("graphs", [True, False], ids=["graphs", "eager"])
def test_bf16_lent_blocks_plain_rows_and_mixed_batches_answer_alike(graphs: bool) -> None:
    forward, loaded = _mlp("bf16")
    launcher = CudaLauncher(forward, CPU, loaded.inputs, loaded.outputs, 3,
                            [_graphs(forward, [torch.bfloat16], (256,), 8) for _ in range(3)]
                            if graphs else ())
    pool = PinnedPool(loaded.inputs, 8, limit=2, pinned=False, precision="bf16")
    data = loaded.dataset.sample_inputs(np.arange(16))["input"]
    held = to_block(data, torch.bfloat16)
    picked = np.array([3, 9, 0, 14, 7])

    def lent_request(rows: np.ndarray, seq: int) -> Request:
        lent = pool.lend(len(rows))
        assert lent is not None
        np.take(held, rows, axis=0, out=lent.arrays["input"], mode="clip")
        return Request(lent.arrays, len(rows), lambda _: None, 0, 0, None, seq, lent)

    def answer(slot: int, requests: list[Request]) -> np.ndarray:
        launcher.launch(slot, Batch(requests, sum(r.rows for r in requests), 0))
        return launcher.finish(slot)[0][0]

    plain = answer(0, _batch([{"input": data[picked]}]).requests)  # FP32, cast on the device
    alone = answer(1, [lent_request(picked, 0)])  # bf16 as lent
    plain_part = Request({"input": data[picked[3:]]}, 2, lambda _: None, 0, 0, None, 2)
    mixed = answer(2, [lent_request(picked[:3], 1), plain_part])  # widened, then joined
    np.testing.assert_array_equal(alone, plain)
    np.testing.assert_array_equal(mixed, plain)
    if graphs:  # the FP32 rows landed in the slot's device input, then were cast
        assert launcher.graphs[0].static_inputs(8)[0].dtype == torch.bfloat16
        assert launcher._slots[0].dev_in[0] is not None
        assert launcher._slots[0].dev_in[0].dtype == torch.float32
        assert launcher._slots[1].dev_in[0] is None  # the lent block went in as it is
