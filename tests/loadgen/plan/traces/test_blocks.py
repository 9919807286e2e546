"""A Mooncake trace's prompts: equal hash ids are equal token blocks (exact lengths under each
tokenizer, shared prefixes exactly as long as the shared ids), and the ideal cache's hits."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.plan.traces.blocks import BlockPrompts, ideal_cached_tokens
from loadgen.plan.traces.rows import TraceRows
from loadgen.plan.words import count_tokens

IDS = ((0, 1, 2), (0, 1), (0, 5, 6), (7,), (0, 1, 2))
LENGTHS = (40, 32, 35, 9, 48)


def _rows() -> TraceRows:
    n = len(IDS)
    return TraceRows(np.arange(n, dtype=np.float64), np.asarray(LENGTHS, dtype=np.int64),
                     np.full(n, 4, dtype=np.int64), IDS)


@pytest.mark.parametrize("tokenizer", ["approx", "bytes"])
def test_equal_ids_are_equal_blocks(tokenizer: str) -> None:
    source = BlockPrompts(_rows(), 16, tokenizer, seed=11)
    prompts = [source.prompt(i) for i in range(len(IDS))]
    for prompt, length in zip(prompts, LENGTHS, strict=True):
        assert prompt.input_tokens == length == count_tokens(prompt.text, tokenizer)
        assert prompt.max_tokens == 4
    cut = 32 if tokenizer == "bytes" else len(" ".join(prompts[0].text.split()[:32])) + 1
    assert prompts[1].text == prompts[0].text[:cut]  # ids (0, 1): the first two blocks of row 0
    assert prompts[4].text.startswith(prompts[0].text)  # row 0's partial last block is a prefix
    def tokens(text: str) -> list[str]:
        return list(text) if tokenizer == "bytes" else text.split()

    assert tokens(prompts[0].text)[:16] == tokens(prompts[2].text)[:16]  # id 0 shared
    assert tokens(prompts[0].text)[16:32] != tokens(prompts[2].text)[16:32]  # 1 vs 5
    assert source.prompt(len(IDS)) == prompts[0]  # sample indexes wrap


def test_ideal_cached_tokens() -> None:
    # row 1: 2 blocks seen (32); row 2: block 0 (16); row 3: none; row 4: 3 blocks, capped 48
    assert ideal_cached_tokens(_rows(), 16) == (32 + 16 + 0 + 48, sum(LENGTHS))
    assert BlockPrompts(_rows(), 16, "bytes", 1).describe()["ideal_hit_rate"] == \
        pytest.approx(96 / sum(LENGTHS))
