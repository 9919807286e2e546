"""The engine's outputs equal a bare greedy decode whatever the batching; blocks come back."""

from __future__ import annotations

import threading

import pytest

from sut.errors import InvalidInput, Overloaded
from sut.llm.reference import greedy_decode
from sut.llm.sequence import Delta, SamplingParams
from sut.llm.tokenizer import EOS, decode, encode
from tests.sut.llm.conftest import Collected

PROMPTS = [encode(f"Question {i}: what is {'ab' * (i % 5)} the answer, {i * 7}?") for i in range(10)]
SHARED = [encode("A shared system prompt that spans a few blocks. " + tail)
          for tail in ("one", "two", "three", "four", "one")]
GREEDY = SamplingParams(max_tokens=24, ignore_eos=True)


def _expected(runner, prompts, params=GREEDY):
    model = runner.engine.runner.model
    return [decode(greedy_decode(model, p, params.max_tokens, params.ignore_eos,
                                 params.min_tokens)) for p in prompts]


def _all_free(runner) -> bool:
    blocks = runner.engine.blocks
    return blocks.num_free == blocks.num_blocks


@pytest.mark.parametrize("knobs", [
    {"max_num_seqs": 1},
    {"max_num_seqs": 16},
    {"max_num_seqs": 4, "max_num_batched_tokens": 16, "block_size": 4},  # chunked prefill
    {"max_num_seqs": 8, "enable_chunked_prefill": False, "max_num_batched_tokens": 128},
    {"max_num_seqs": 8, "scheduler": "static"},
    {"max_num_seqs": 8, "num_kv_blocks": 12, "block_size": 8},  # forces preemption
    {"max_num_seqs": 8, "scheduling_policy": "priority", "block_size": 4, "num_kv_blocks": 40},
])
def test_outputs_equal_greedy_decode_and_blocks_come_back(make_engine, knobs) -> None:
    runner = make_engine(**knobs)
    priorities = [i % 3 for i in range(len(PROMPTS))]
    results = runner.run(PROMPTS, GREEDY, priorities)
    assert [r.text for r in results] == _expected(runner, PROMPTS)
    assert all(r.last.finish_reason == "length" and r.last.output_tokens == 24 for r in results)
    assert _all_free(runner)
    if knobs.get("num_kv_blocks") == 12:
        assert any(r.last.timings.preemptions for r in results)


def test_prefix_caching_reuses_blocks_and_keeps_outputs(make_engine) -> None:
    runner = make_engine(block_size=4, max_num_seqs=1)
    results = runner.run(SHARED, GREEDY)
    assert [r.text for r in results] == _expected(runner, SHARED)
    cached = [r.last.timings.cached_tokens for r in results]
    assert cached[0] == 0 and min(cached[1:]) >= 48  # the shared prefix, in whole blocks
    assert cached[4] == (len(SHARED[4]) - 1) // 4 * 4  # the same prompt again: all but one block
    assert _all_free(runner)


def test_static_batching_admits_only_when_the_batch_is_done(make_engine) -> None:
    runner = make_engine(max_num_seqs=2, scheduler="static")
    runner.run(PROMPTS[:5], GREEDY)
    admitted = [r["admitted"] for r in runner.engine.trace if r["admitted"]]
    assert admitted == [2, 2, 1]


def test_stop_rules(make_engine) -> None:
    runner = make_engine()
    prompt = PROMPTS[1]
    free = greedy_decode(runner.engine.runner.model, prompt, 24, ignore_eos=True)
    text = decode(free)
    stop = text[5:7]
    [hit] = runner.run([prompt], SamplingParams(max_tokens=24, stop=(stop,)))
    assert hit.last.finish_reason == "stop" and hit.text == text[:text.find(stop)]
    [short] = runner.run([prompt], SamplingParams(max_tokens=3, ignore_eos=True))
    assert short.last.finish_reason == "length" and short.last.output_tokens == 3


def test_eos_stops_unless_ignored_and_min_tokens_masks_it(make_engine) -> None:
    runner = make_engine()
    head = runner.engine.runner.model.head
    head.bias.data[EOS] = 50.0  # EOS always wins
    [eos] = runner.run([PROMPTS[0]], SamplingParams(max_tokens=8))
    assert eos.last.finish_reason == "stop" and eos.last.output_tokens == 1
    [ignored] = runner.run([PROMPTS[0]], SamplingParams(max_tokens=8, ignore_eos=True))
    assert ignored.last.finish_reason == "length" and ignored.last.output_tokens == 8
    [least] = runner.run([PROMPTS[0]], SamplingParams(max_tokens=8, min_tokens=5))
    assert least.last.finish_reason == "stop" and least.last.output_tokens == 6


def test_seeded_sampling_repeats_and_survives_preemption(make_engine) -> None:
    params = SamplingParams(max_tokens=16, temperature=1.0, top_p=0.9, seed=7, ignore_eos=True)
    roomy = make_engine().run(PROMPTS[:6], params)
    tight = make_engine(num_kv_blocks=10, block_size=8).run(PROMPTS[:6], params)
    assert [r.text for r in roomy] == [r.text for r in tight]
    assert any(r.last.timings.preemptions for r in tight)


def test_stream_interval_batches_deltas(make_engine) -> None:
    [r] = make_engine(stream_interval=5).run([PROMPTS[0]], GREEDY)
    assert [d.new_tokens for d in r.deltas] == [5, 5, 5, 5, 4]


def test_cancel_frees_blocks(make_engine) -> None:
    runner = make_engine()
    engine = runner.engine
    first = threading.Event()
    ended: list[Delta] = []
    done = threading.Event()

    def on_output(delta: Delta) -> None:
        first.set()
        if delta.finished:
            ended.append(delta)
            done.set()

    rid = engine.submit(PROMPTS[0], SamplingParams(max_tokens=400, ignore_eos=True), on_output)
    assert first.wait(60)
    engine.cancel(rid)
    assert done.wait(60)
    assert ended[0].finish_reason == "abort" and ended[0].output_tokens < 400
    assert runner.engine.blocks.num_free == runner.engine.blocks.num_blocks


def test_bounded_queue_and_bad_requests(make_engine) -> None:
    runner = make_engine(max_waiting=2, max_num_seqs=1)
    engine = runner.engine
    gate = threading.Event()
    with engine._lock:  # hold the loop so nothing is admitted meanwhile
        engine.submit(PROMPTS[0], GREEDY, lambda d: gate.set() if d.finished else None)
        engine.submit(PROMPTS[1], GREEDY, lambda d: None)
        with pytest.raises(Overloaded):
            engine.submit(PROMPTS[2], GREEDY, lambda d: None)
    assert gate.wait(60)
    with pytest.raises(InvalidInput):
        engine.submit([], GREEDY, lambda d: None)
    with pytest.raises(InvalidInput):
        engine.submit([65] * 600, GREEDY, lambda d: None)


def test_a_request_whose_callback_raises_fails_alone_and_the_others_keep_their_tokens(
        make_engine) -> None:
    runner = make_engine(max_num_seqs=4, block_size=4)
    results = [Collected() for _ in range(4)]
    done = threading.Event()
    ended: list[int] = []

    def collect(index: int):
        def on_output(delta: Delta) -> None:
            results[index].deltas.append(delta)
            if index == 1 and len(results[index].deltas) == 2 and not delta.finished:
                raise RuntimeError("the client broke")  # sent while the next step computes
            if delta.finished:
                ended.append(index)
                if len(ended) == 4:
                    done.set()
        return on_output

    for i, prompt in enumerate(PROMPTS[:4]):
        runner.engine.submit(prompt, GREEDY, collect(i))
    assert done.wait(120), "the engine did not finish in time"
    broken = results[1].last
    assert broken.finish_reason == "error" and "the client broke" in (broken.error or "")
    others = [0, 2, 3]
    assert [results[i].text for i in others] == _expected(runner, [PROMPTS[i] for i in others])
    assert _all_free(runner)
