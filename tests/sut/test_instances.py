"""The service's executor paths on the CPU: pipelined instances, lent blocks, the options."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import numpy as np
import pytest
import torch

from sut.batcher import Batcher, BatcherConfig
from sut.errors import ConfigError, InvalidInput, SutError
from sut.instances import ExecutorChoice, choose
from sut.models import load_model
from sut.options import parse_options
from sut.service import InferenceService, InferResult
from sut.staging import PinnedPool
from tests.sut.test_service import serve, submitted


@pytest.mark.parametrize("cuda, pipelined, graphs, expect", [
    (True, None, None, ExecutorChoice(True, True)),
    (False, None, None, ExecutorChoice(False, False)),
    (True, False, None, ExecutorChoice(False, False)),  # graphs need the pipeline
    (True, None, False, ExecutorChoice(True, False)),
    (False, True, True, ExecutorChoice(True, False)),  # and CUDA
])
def test_choose(cuda: bool, pipelined: bool | None, graphs: bool | None,
                expect: ExecutorChoice) -> None:
    assert choose(cuda, pipelined, graphs) == expect
    assert choose(cuda, pipelined, graphs, True).completion_thread is expect.pipelined


def test_the_options_parse_flags_and_refuse_other_words() -> None:
    parsed = parse_options({"pipelined": "true", "cuda_graphs": "off", "instances": "3"})
    assert (parsed.pipelined, parsed.cuda_graphs, parsed.instances) == (True, False, 3)
    with pytest.raises(ConfigError) as caught:
        parse_options({"cuda_graphs": "maybe"})
    assert caught.value.key == "cuda_graphs"


@pytest.mark.parametrize("completion_thread", ["false", "true"])
def test_pipelined_on_the_cpu_answers_as_the_model_does_and_says_so(
        completion_thread: str) -> None:
    async def body(s: InferenceService) -> tuple[dict[str, Any], list[Any]]:
        xs = [s.sample_inputs(np.arange(i, i + 1 + i % 5)) for i in range(40)]
        results = await asyncio.gather(*(s.infer(x) for x in xs))
        return s.describe(), list(zip(xs, results, strict=True))

    info, pairs = serve("mlp", body, device="cpu", pipelined="true", max_batch_size="8",
                        max_queue_delay_us="500", completion_thread=completion_thread)
    assert info["pipelined"] is True and info["cuda_graphs"] is False
    threads = ("issue and completion threads" if completion_thread == "true"
               else "one thread")
    assert info["executor"] == (f"pipelined (3-slot ring, {threads}), eager, "
                                f"{info['instances']} per device")
    assert info["in_flight"] == 3 * info["workers"]
    module = load_model("mlp", {}, 0).module
    with torch.inference_mode():
        for x, result in pairs:
            want = module(torch.from_numpy(x["input"])).numpy()
            np.testing.assert_allclose(result.outputs["output"], want, rtol=1e-5, atol=1e-6)
            assert min(result.timings_ns.values()) >= 0


def test_serial_is_the_cpu_default_and_says_so() -> None:
    async def body(s: InferenceService) -> dict[str, Any]:
        return s.describe()

    info = serve("mlp", body, device="cpu")
    assert (info["pipelined"], info["cuda_graphs"]) == (False, False)
    assert info["executor"] == f"serial, eager, {info['instances']} per device"


def test_a_failing_batch_fails_alone_in_the_pipeline() -> None:
    async def body(s: InferenceService) -> list[Any]:
        xs = [np.full((1, 4), 5000.0 if i == 3 else float(i), np.float32) for i in range(12)]
        # one request per batch (max_batch_size=1), so only the bad one fails
        return list(await asyncio.gather(*(s.infer({"input": x}) for x in xs),
                                         return_exceptions=True))

    results = serve("import:tests.sut.user_models:picky", body, device="cpu",
                    pipelined="true", max_batch_size="1", input_shape="4")
    assert isinstance(results[3], SutError) and "above 1000" in str(results[3])
    good = [r for i, r in enumerate(results) if i != 3]
    assert all(isinstance(r, InferResult) for r in good)
    assert [float(r.outputs["output"][0, 0]) for r in good] == [i for i in range(12) if i != 3]


def test_a_lent_block_goes_back_when_answered_and_when_refused() -> None:
    async def body(s: InferenceService) -> tuple[list[int], str]:
        assert s._instances is not None
        s._instances.pool = pool = PinnedPool(s.metadata.inputs, 8, limit=1, pinned=False)
        order: list[int] = []
        for i in range(3):  # one block only: each lend succeeds only if the last came back
            lent = s.lend(4)
            assert lent is not None
            order.append(lent.block)
            data = s.sample_inputs(np.arange(i, i + 4))["input"]
            np.copyto(lent.arrays["input"], data)
            result = await submitted(s, lent.arrays, lent=lent)
            np.testing.assert_allclose(result.outputs["output"],
                                       load_model("mlp", {}, 0).module(
                                           torch.from_numpy(data)).detach().numpy(),
                                       rtol=1e-5, atol=1e-6)
        lent = pool.lend(4)
        assert lent is not None
        with pytest.raises(InvalidInput) as refused:
            s.submit({"wrong": lent.arrays["input"]}, lambda _: None, lent=lent)
        assert pool.lend(4) is not None  # the refused block came back
        return order, str(refused.value)

    order, refused = serve("mlp", body, device="cpu", pipelined="true")
    assert order == [0, 0, 0] and "want inputs" in refused


def test_a_request_that_cannot_make_a_batch_due_wakes_no_worker() -> None:
    batcher = Batcher(BatcherConfig(max_batch_size=4, max_queue_delay_us=10_000_000))
    wakes, waiting = [], threading.Event()
    notify, wait = batcher._due.notify, batcher._due.wait

    def counting(n: int = 1) -> None:
        wakes.append(n)
        notify(n)

    def waits(timeout: float | None = None) -> bool:
        waiting.set()
        return wait(timeout)

    batcher._due.notify = counting  # type: ignore[method-assign]
    batcher._due.wait = waits  # type: ignore[method-assign]
    row = {"x": np.zeros((1, 1), np.float32)}
    batcher.submit(row, 1, lambda _: None)
    assert not wakes  # no worker waits: nobody to wake
    got: list[Any] = []
    taker = threading.Thread(target=lambda: got.append(batcher.next_batch()))
    taker.start()
    assert waiting.wait(10)  # the worker took the request and waits for its delay
    for _ in range(2):
        batcher.submit(row, 1, lambda _: None)
    assert not wakes  # they join the forming batch; its timer stands
    batcher.submit(row, 1, lambda _: None)
    assert len(wakes) == 1  # four rows: a full batch is due now
    taker.join(10)
    assert got and got[0] is not None and got[0].rows == 4
    batcher.close(drain=False)


@pytest.mark.parametrize("pipelined", ["false", "true"])
def test_every_cpu_path_reads_a_lent_block_and_an_output_viewing_it_stays_the_callers(
        pipelined: str) -> None:
    async def body(s: InferenceService) -> tuple[list[int], list[np.ndarray], list[InferResult]]:
        blocks, sent, results = [], [], []
        for i in range(3):
            lent = s.lend(4)  # on the CPU too, on either path
            assert lent is not None
            blocks.append(lent.block)
            x = np.arange(16, dtype=np.float32).reshape(4, 4) + 100 * i
            np.copyto(lent.arrays["input"], x)
            sent.append(x)
            results.append(await submitted(s, lent.arrays, lent=lent))
        return blocks, sent, results

    blocks, sent, results = serve("import:tests.sut.user_models:first_two", body, device="cpu",
                                  pipelined=pipelined, input_shape="4")
    assert blocks == [blocks[0]] * 3  # the same block, lent again once answered
    for x, result in zip(sent, results, strict=True):  # later lends overwrote the block
        assert result.outputs["output"].tolist() == x[:, :2].tolist()


def test_a_blocks_views_are_made_once_per_row_count_and_share_its_memory() -> None:
    loaded = load_model("mlp", {}, 0)
    pool = PinnedPool(loaded.inputs, 8, limit=1, pinned=False)
    full = pool.lend(8)
    assert full is not None and pool.lend(8) is None  # the only block is out
    pool.give_back(full)
    assert pool.lend(8) is full  # the same views, not made again
    pool.give_back(full)
    part = pool.lend(3)
    assert part is not None and part.block == full.block and part.rows == 3
    assert part.arrays["input"].shape[0] == 3 and part.tensors["input"].shape[0] == 3
    assert np.shares_memory(part.arrays["input"], full.arrays["input"])
    assert part.tensors["input"].data_ptr() == full.tensors["input"].data_ptr()
    pool.give_back(part)
    assert pool.lend(3) is part and pool.lend(9) is None  # more rows than a block holds


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("pipelined", ["false", "true"])
def test_bf16_lent_blocks_hold_bf16_and_answer_as_plain_fp32_requests_do(
        model: str, pipelined: str) -> None:
    async def body(s: InferenceService) -> list[tuple[InferResult, InferResult]]:
        block = s.sample_inputs(np.arange(12))
        held = s.lendable(block)
        assert held["input"].dtype == np.uint16  # bf16 bits, converted once
        pairs = []
        for picked in (np.array([3, 1, 4, 1]), np.arange(12)[::-1][:7]):
            lent = s.lend(len(picked))
            assert lent is not None
            assert lent.arrays["input"].dtype == np.uint16
            assert lent.tensors["input"].dtype == torch.bfloat16
            np.take(held["input"], picked, axis=0, out=lent.arrays["input"], mode="clip")
            via_block = await submitted(s, lent.arrays, lent=lent)
            plain = await s.infer({"input": block["input"][picked]})  # cast in the forward
            pairs.append((via_block, plain))
        with pytest.raises(InvalidInput, match="FP32"):  # bits only in a lent block
            s.submit({"input": held["input"][:2]}, lambda _: None)
        return pairs

    pairs = serve(model, body, device="cpu", precision="bf16", pipelined=pipelined,
                  max_batch_size="8", max_queue_delay_us="0")
    for via_block, plain in pairs:
        assert via_block.batch_size == plain.batch_size
        assert via_block.outputs["output"].dtype == np.float32
        np.testing.assert_array_equal(via_block.outputs["output"], plain.outputs["output"])


@pytest.mark.parametrize("pipelined", ["false", "true"])
def test_a_bf16_lent_block_batched_with_plain_rows_answers_as_plain_rows_do(
        pipelined: str) -> None:
    async def body(s: InferenceService) -> tuple[list[InferResult], list[InferResult]]:
        block = s.sample_inputs(np.arange(6))
        lent = s.lend(4)
        assert lent is not None
        np.copyto(lent.arrays["input"], s.lendable(block)["input"][:4])
        # a full batch of 6 rows is due at once: the lent 4 rows and the plain 2 together
        mixed = await asyncio.gather(submitted(s, lent.arrays, lent=lent),
                                     submitted(s, {"input": block["input"][4:]}))
        plain = await asyncio.gather(submitted(s, {"input": block["input"][:4]}),
                                     submitted(s, {"input": block["input"][4:]}))
        return list(mixed), list(plain)

    mixed, plain = serve("mlp", body, device="cpu", precision="bf16", pipelined=pipelined,
                         max_batch_size="6", max_queue_delay_us="5000000", warmup="0")
    assert [r.batch_size for r in mixed] == [6, 6] == [r.batch_size for r in plain]
    for got, want in zip(mixed, plain, strict=True):
        np.testing.assert_array_equal(got.outputs["output"], want.outputs["output"])


def test_fp32_lent_blocks_are_unchanged() -> None:
    async def body(s: InferenceService) -> None:
        block = s.sample_inputs(np.arange(4))
        assert s.lendable(block)["input"] is block["input"]  # nothing converted
        lent = s.lend(4)
        assert lent is not None and lent.arrays["input"].dtype == np.float32
        assert not lent.spec_dtypes
        s._give_back(lent)

    serve("mlp", body, device="cpu")
