"""Decode through persistent buffers, padded to buckets; CUDA graphs fall back to eager on CPU;
a step's deltas leave while the next step runs."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

import pytest
import torch

from sut.llm.config import EngineConfig
from sut.llm.engine import LLMEngine
from sut.llm.graphs import DecodeBuffers, bucket_for, buckets, compare_logits
from sut.llm.reference import greedy_decode
from sut.llm.sequence import Delta, SamplingParams, Sequence
from sut.llm.tokenizer import decode, encode
from tests.sut.llm.test_engine import GREEDY, PROMPTS


@pytest.mark.parametrize(("limit", "sizes"), [
    (1, (1,)), (2, (1, 2)), (12, (1, 2, 4, 8, 12)), (16, (1, 2, 4, 8, 16)),
    (17, (1, 2, 4, 8, 16, 17))])
def test_buckets_are_powers_of_two_then_the_limit(limit: int, sizes: tuple[int, ...]) -> None:
    assert buckets(limit) == sizes


def test_a_count_goes_to_the_smallest_bucket_that_holds_it() -> None:
    sizes = buckets(12)
    assert [bucket_for(n, sizes) for n in (1, 2, 3, 5, 8, 9, 12, 13)] == \
        [1, 2, 4, 8, 8, 12, 12, None]
    with pytest.raises(ValueError):
        buckets(0)


def test_fill_pads_rows_and_width_with_the_pad_block() -> None:
    buffers = DecodeBuffers(max_seqs=8, max_blocks=6, block_size=4, pad_block=50,
                            device=torch.device("cpu"))
    buffers.fill([7, 8, 9], [5, 0, 9], [41, 12, 33], [[10, 11], [3], [7, 8, 9]], rows=4,
                 width=4)
    assert buffers.tokens[:4].tolist() == [7, 8, 9, 0]
    assert buffers.positions[:4].tolist() == [5, 0, 9, 0]
    assert buffers.slots[:4].tolist() == [41, 12, 33, 200]  # the pad row writes the pad block
    assert buffers.tables[:4, :4].tolist() == [[10, 11, 50, 50], [3, 50, 50, 50],
                                               [7, 8, 9, 50], [50, 50, 50, 50]]
    with pytest.raises(ValueError):
        buffers.fill([1] * 5, [0] * 5, [0] * 5, [[0]] * 5, rows=4, width=1)
    with pytest.raises(ValueError):
        buffers.fill([1], [0], [0], [[0]], rows=1, width=7)


def test_compare_logits_catches_a_difference_and_a_moved_minus_inf() -> None:
    want = torch.tensor([[1.0, float("-inf"), 3.0]])
    assert compare_logits(want.clone(), want, 1e-4) is None
    assert "differs" in (compare_logits(want + torch.tensor([[0.0, 0.0, 0.1]]), want, 1e-4)
                         or "")
    moved = torch.tensor([[float("-inf"), 2.0, 3.0]])
    assert "non-finite" in (compare_logits(moved, want, 1e-4) or "")


def _engine(**knobs: object) -> LLMEngine:
    return LLMEngine.build("tiny-llm", EngineConfig(device="cpu", **knobs))  # type: ignore[arg-type]


def test_padding_to_a_bucket_changes_no_real_row_and_writes_only_the_pad_block() -> None:
    engine = _engine(max_num_seqs=8, block_size=4, num_kv_blocks=40)
    runner = engine.runner
    seqs = []
    for i, prompt in enumerate(PROMPTS[:3]):
        seq = Sequence(i, prompt, GREEDY, lambda delta: None, 0)
        seq.blocks = list(range(i * 12, i * 12 + 12))
        seq.computed = len(prompt) - 1  # the last prompt token is this step's one token
        seqs.append(seq)
    work = [(seq, 1) for seq in seqs]
    widest = max(len(seq.blocks) for seq in seqs)
    with torch.inference_mode():
        plain = runner._decode_forward(work, (3, widest, False)).clone()
        before = [k.clone() for k, _ in runner.kv]
        padded = runner._decode_forward(work, (8, 16, False)).clone()
    assert padded.shape == plain.shape == (3, runner.model.vocab_size)
    assert compare_logits(padded, plain, 1e-5) is None
    pad = runner.num_blocks
    for (keys, _), old in zip(runner.kv, before, strict=True):  # real slots: rewritten alike
        torch.testing.assert_close(keys[:pad], old[:pad], rtol=1e-5, atol=1e-5)
    assert not torch.equal(runner.kv[0][0][pad], before[0][pad])  # the pad rows wrote here


def test_decode_steps_reuse_the_same_buffers_and_match_greedy() -> None:
    engine = _engine(max_num_seqs=4, block_size=4)
    engine.start()
    try:
        buffers = engine.runner.decode_buffers
        address = buffers.host.data_ptr()
        fills = [0]
        real = buffers.fill

        def counted(*args: object, **kwargs: object) -> None:
            fills[0] += 1
            real(*args, **kwargs)  # type: ignore[arg-type]

        buffers.fill = counted  # type: ignore[method-assign]
        texts = _run(engine, PROMPTS[:6])
        decodes = sum(1 for r in engine.trace if r["prefill_seqs"] == 0)
    finally:
        engine.stop()
    assert texts == _expected_for(engine, PROMPTS[:6])
    assert decodes > 0 and fills[0] == decodes  # every pure decode step, none other
    assert buffers.host.data_ptr() == address and engine.runner.decode_buffers is buffers


@pytest.mark.parametrize(("knob", "reason"), [(True, "CUDA device"), (False, "cuda_graphs=false")])
def test_cuda_graphs_are_a_logged_no_op_on_cpu(knob: bool, reason: str) -> None:
    engine = _engine(max_num_seqs=4, cuda_graphs=knob)
    engine.start()
    try:
        path = engine.describe()["decode_path"]
        texts = _run(engine, PROMPTS[:3])
    finally:
        engine.stop()
    assert path["path"] == "eager" and reason in path["reason"]
    assert engine.runner.graphs is None
    assert texts == _expected_for(engine, PROMPTS[:3])


def test_a_steps_deltas_leave_before_the_next_forward_and_in_order() -> None:
    engine = _engine(max_num_seqs=2)
    events: list[str] = []
    model = engine.runner.model
    real = model.forward

    def forward(*args: object) -> torch.Tensor:
        events.append("forward")
        return real(*args)  # type: ignore[arg-type]

    model.forward = forward  # type: ignore[method-assign]
    engine.start()
    events.clear()
    deltas: list[Delta] = []
    try:
        _run(engine, [encode("hi")], SamplingParams(max_tokens=4, ignore_eos=True),
             lambda delta: (deltas.append(delta), events.append("delta")))
    finally:
        engine.stop()
    assert events == ["forward", "delta"] * 4  # each delta goes out before the next step
    assert [d.output_tokens for d in deltas] == [1, 2, 3, 4] and deltas[-1].finished
    assert all(a.emit_ns < b.emit_ns for a, b in itertools.pairwise(deltas))


def _run(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams = GREEDY,
         also: Callable[[Delta], object] | None = None) -> list[str]:
    texts = [""] * len(prompts)
    left = [len(prompts)]
    done = threading.Event()

    def collect(i: int):  # type: ignore[no-untyped-def]
        def on_output(delta: Delta) -> None:
            texts[i] += delta.text
            if also is not None:
                also(delta)
            if delta.finished:
                left[0] -= 1
                if not left[0]:
                    done.set()
        return on_output

    for i, prompt in enumerate(prompts):
        engine.submit(prompt, params, collect(i))
    assert done.wait(120), "the engine did not finish in time"
    return texts


def _expected_for(engine: LLMEngine, prompts: list[list[int]]) -> list[str]:
    model = engine.runner.model
    return [decode(greedy_decode(model, p, GREEDY.max_tokens, GREEDY.ignore_eos))
            for p in prompts]
