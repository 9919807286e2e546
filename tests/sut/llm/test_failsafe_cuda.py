"""The LLM server fails closed on a CUDA device too: extreme but valid sampling values batched
with hostile and ordinary requests, at fp32 and fp16, leave the engine serving and the KV
cache empty (marker `cuda`; `scripts/gpu_checks.sh` runs it with `pytest -m cuda`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import torch

from sut.llm.config import EngineConfig
from sut.llm.server import LlmServerThread
from sut.server.core import ServerConfig
from tests.sut.llm.hostile import post, wait_for

pytestmark = [pytest.mark.cuda, pytest.mark.functional,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

BASE = {"prompt": "Hello", "max_tokens": 16, "ignore_eos": True}
ANSWERED: list[dict[str, Any]] = [
    {"temperature": 0}, {"temperature": 1e308}, {"temperature": 1e-45},
    {"temperature": 1, "seed": 2**45}, {"temperature": 1, "seed": -(2**44)},
    {"temperature": 0.8, "top_p": 1e-9}, {"temperature": 0.8, "top_k": 10**9},
]
REFUSED: list[Any] = [
    '{"prompt": "x", "temperature": 1e999}', '{"prompt": "x", "top_p": NaN}',
    {"prompt": [256, 999]}, {"prompt": [256, -1]}, '{"prompt": "\\ud800"}',
]


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_extreme_sampling_on_cuda_keeps_the_engine_serving(dtype: str) -> None:
    config = EngineConfig(device="cuda", dtype=dtype, max_num_seqs=8)
    with LlmServerThread("tiny-llm", config, ServerConfig(http_port=0)) as running:
        bodies = [{**BASE, **extra} for extra in ANSWERED] * 3 + REFUSED * 3
        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(lambda b: post(running.url, "/v1/completions", b), bodies))
        for body, answer in zip(bodies, answers, strict=True):
            want = 200 if isinstance(body, dict) and body.get("max_tokens") else 400
            assert answer.status == want, (body, answer.body)
            if want == 200:
                assert answer.body["usage"]["completion_tokens"] == 16
        engine = running.server.engine
        assert engine.alive
        wait_for(lambda: engine.blocks.num_free == engine.blocks.num_blocks)
