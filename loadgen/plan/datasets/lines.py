"""A line pool (sonnet-style synthetic prompts): every prompt starts with the same shared
prefix cut from the pool's first lines, then seeded random lines, cut to its length."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path

import numpy as np

from loadgen.errors import SettingsError
from loadgen.plan.datasets.rows import read_text
from loadgen.plan.words import count_tokens, cut_tokens

__all__ = ["LinePool", "read_lines"]


class LinePool:
    """The non-empty lines of a text file, drawn into prompts of a token length."""

    def __init__(self, path: str | Path, lines: list[str]) -> None:
        self.path = str(path)
        self.lines = lines

    def _long_enough(self, text: str, tokens: int, tokenizer: str, more: Callable[[], str]) -> str:
        while count_tokens(text, tokenizer) < tokens:
            text += "".join(more() for _ in range(8))
        return cut_tokens(text, tokens, tokenizer)

    def prefix(self, tokens: int, tokenizer: str) -> str:
        """The shared prefix: the pool's lines in order (repeated as needed), cut."""
        lines = itertools.cycle(self.lines)
        return self._long_enough("", tokens, tokenizer, lambda: next(lines) + "\n")

    def body(self, rng: np.random.Generator, tokens: int, tokenizer: str) -> str:
        """Seeded random lines, cut to `tokens`."""
        return self._long_enough("", tokens, tokenizer,
                                 lambda: self.lines[int(rng.integers(len(self.lines)))] + "\n")


def read_lines(path: str | Path) -> LinePool:
    """The pool of a text file's non-empty lines."""
    lines = [line.strip() for line in read_text(path).splitlines() if line.strip()]
    if not lines:
        raise SettingsError([f"dataset: {path}: holds no lines"])
    return LinePool(path, lines)
