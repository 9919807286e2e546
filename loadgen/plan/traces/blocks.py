"""Prompts of a trace that names its prefix blocks (Mooncake `hash_ids`), and the hit rate an
ideal prefix cache would reach on them.

Row i's prompt is the text of its blocks in order: block id h is always the same
`block_tokens` tokens (seeded by h), and a row's partial last block is the start of
its block's text, so rows with equal leading ids share exactly that prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.plan.prompts import Prompt
from loadgen.plan.traces.rows import TraceRows
from loadgen.plan.words import synthetic_text

__all__ = ["BlockPrompts", "ideal_cached_tokens"]


def ideal_cached_tokens(rows: TraceRows, block_tokens: int) -> tuple[int, int]:
    """(cached, prompt) tokens over the trace in order, for a cache that forgets nothing:
    a row's cached tokens are its leading blocks already seen (ids are chained, so a
    seen id means a seen prefix), capped at its length."""
    assert rows.hash_ids is not None
    seen: set[int] = set()
    cached = 0
    for ids, length in zip(rows.hash_ids, rows.input_tokens.tolist(), strict=True):
        hit = 0
        while hit < len(ids) and ids[hit] in seen:
            hit += 1
        cached += min(hit * block_tokens, length)
        seen.update(ids)
    return cached, int(rows.input_tokens.sum())


@dataclass(frozen=True, slots=True)
class BlockPrompts:
    """Row i's prompt is its hash blocks' text; query i of the replay asks row i."""

    rows: TraceRows
    block_tokens: int
    tokenizer: str
    seed: int
    fixed_output: bool = False
    in_order: bool = True

    def _block(self, block_id: int, tokens: int) -> str:
        text = synthetic_text(np.random.default_rng((self.seed, 8, block_id)),
                              self.block_tokens, self.tokenizer)
        if tokens >= self.block_tokens:
            return text
        if self.tokenizer == "bytes":
            return text[:tokens]
        return "".join(" " + word for word in text.split()[:tokens])

    def prompt(self, index: int) -> Prompt:
        """Row `index` (mod rows): its blocks' text, its output length."""
        index %= self.rows.input_tokens.size
        assert self.rows.hash_ids is not None
        ids, length = self.rows.hash_ids[index], int(self.rows.input_tokens[index])
        last = length - self.block_tokens * (len(ids) - 1)
        text = "".join(self._block(h, self.block_tokens if n < len(ids) - 1 else last)
                       for n, h in enumerate(ids))
        return Prompt(text, length, int(self.rows.output_tokens[index]), self.fixed_output)

    @property
    def ideal_hit_rate(self) -> float:
        """The hit rate of a cache that forgets nothing, over the trace in order."""
        cached, total = ideal_cached_tokens(self.rows, self.block_tokens)
        return cached / total if total else 0.0

    def describe(self) -> dict[str, Any]:
        """Plain values for the plan's record (with the ideal cache's hit rate)."""
        return {"kind": "trace", "samples": int(self.rows.input_tokens.size),
                "mean_input_tokens": float(self.rows.input_tokens.mean()),
                "mean_output_tokens": float(self.rows.output_tokens.mean()),
                "block_tokens": self.block_tokens, "tokenizer": self.tokenizer,
                "ideal_hit_rate": self.ideal_hit_rate, "seed": self.seed}
