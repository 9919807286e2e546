"""The LLM engine on a CUDA device: greedy outputs equal the CPU reference, graphs on and off,
chunked prefill on and off; graphs replay at padded buckets; the decode buffers are pinned and
reused; a graph that fails its check leaves the engine eager, with the reason.

Skipped without a CUDA GPU (marker `cuda`); `scripts/gpu_checks.sh` runs them.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache

import pytest
import torch

from sut.llm.config import EngineConfig
from sut.llm.engine import LLMEngine
from sut.llm.graphs import DecodeGraphs
from sut.llm.model import load_causal_model
from sut.llm.reference import greedy_decode
from sut.llm.sequence import SamplingParams
from sut.llm.tokenizer import decode
from tests.sut.llm.conftest import Runner
from tests.sut.llm.test_engine import PROMPTS

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

PARAMS = SamplingParams(max_tokens=20, ignore_eos=True)


@cache
def _cpu_reference(model: str) -> tuple[str, ...]:
    cpu = load_causal_model(model, 0, "cpu")
    return tuple(decode(greedy_decode(cpu, p, PARAMS.max_tokens, True)) for p in PROMPTS)


@pytest.fixture
def cuda_engine() -> Iterator[object]:
    engines: list[LLMEngine] = []

    def make(model: str, **knobs: object) -> LLMEngine:
        config = EngineConfig(device="cuda", num_kv_blocks=512, max_model_len=256,
                              **knobs)  # type: ignore[arg-type]
        engine = LLMEngine.build(model, config)
        engine.start()
        engines.append(engine)
        return engine

    yield make
    for engine in engines:
        engine.stop()


@pytest.mark.parametrize("model", ["tiny-llm", "small-llm"])
@pytest.mark.parametrize("graphs", [True, False])
@pytest.mark.parametrize("chunked", [True, False])
def test_outputs_on_cuda_equal_the_cpu_reference(cuda_engine, model: str, graphs: bool,
                                                 chunked: bool) -> None:
    knobs = {"max_num_seqs": 6, "cuda_graphs": graphs, "enable_chunked_prefill": chunked,
             "max_num_batched_tokens": 32 if chunked else 128, "block_size": 8}
    engine = cuda_engine(model, **knobs)
    path = engine.describe()["decode_path"]
    assert path["path"] == ("cuda_graphs" if graphs else "eager"), path
    results = Runner(engine).run(PROMPTS, PARAMS)
    assert tuple(r.text for r in results) == _cpu_reference(model)
    assert engine.blocks.num_free == engine.blocks.num_blocks


def test_graphs_replay_at_padded_buckets_through_pinned_reused_buffers(cuda_engine) -> None:
    engine = cuda_engine("tiny-llm", max_num_seqs=6, block_size=8)
    runner = engine.runner
    assert runner.graphs is not None and runner.graphs.batch_sizes == (1, 2, 4, 6)
    buffers = runner.decode_buffers
    assert buffers.host.is_pinned() and buffers.device_block.is_cuda
    address = (buffers.host.data_ptr(), buffers.device_block.data_ptr())
    replays: list[tuple[int, int]] = []
    real = runner.graphs.replay

    def counted(rows: int, width: int) -> torch.Tensor:
        replays.append((rows, width))
        return real(rows, width)

    runner.graphs.replay = counted  # type: ignore[method-assign]
    results = Runner(engine).run(PROMPTS[:5], PARAMS)
    assert tuple(r.text for r in results) == _cpu_reference("tiny-llm")[:5]
    assert replays and {rows for rows, _ in replays} <= {1, 2, 4, 6}
    assert any(rows == 6 for rows, _ in replays)  # 5 sequences padded to the bucket of 6
    assert (buffers.host.data_ptr(), buffers.device_block.data_ptr()) == address


def test_a_graph_failing_its_check_leaves_decode_eager_with_the_reason(
        cuda_engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(DecodeGraphs, "check", lambda self: "differs (planted)")
    engine = cuda_engine("tiny-llm", max_num_seqs=4)
    path = engine.describe()["decode_path"]
    assert path == {"path": "eager", "reason": "differs (planted)"}
    assert engine.runner.graphs is None
    results = Runner(engine).run(PROMPTS[:3], PARAMS)
    assert tuple(r.text for r in results) == _cpu_reference("tiny-llm")[:3]


def test_greedy_picks_read_from_pinned_memory_keep_the_eos_rules(cuda_engine) -> None:
    params = SamplingParams(max_tokens=30, min_tokens=5)  # EOS masked for 5 tokens, then not
    engine = cuda_engine("tiny-llm", max_num_seqs=6)
    assert engine.runner._picked.is_pinned()
    results = Runner(engine).run(PROMPTS, params)
    cpu = load_causal_model("tiny-llm", 0, "cpu")
    assert [r.text for r in results] == [
        decode(greedy_decode(cpu, p, 30, ignore_eos=False, min_tokens=5)) for p in PROMPTS]
    sampled = Runner(engine).run(PROMPTS[:4], SamplingParams(max_tokens=12, temperature=0.8,
                                                             seed=3, ignore_eos=True))
    assert all(r.last.output_tokens == 12 for r in sampled)  # the sampler's own path
