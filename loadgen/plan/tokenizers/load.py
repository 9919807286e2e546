"""`tokenizer = PATH`: a file tokenizer by its name (`.json`: Hugging Face, else a ranks
file), loaded once per process; and synthetic text of an exact length under it."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Protocol

import numpy as np

from loadgen.errors import SettingsError
from loadgen.plan.tokenizers.hf import read_tokenizer_json
from loadgen.plan.tokenizers.ranks import read_ranks

__all__ = ["BUILT_IN", "FileTokenizer", "describe_tokenizer", "file_tokenizer",
           "is_file_tokenizer", "text_of_tokens"]

BUILT_IN = ("approx", "bytes")


class FileTokenizer(Protocol):
    """What the plan and the adapters need of a file tokenizer."""

    name: str

    def count(self, text: str) -> int:
        """Tokens in `text`."""


def is_file_tokenizer(tokenizer: str) -> bool:
    """Whether `tokenizer` names a file rather than a built-in counter."""
    return tokenizer not in BUILT_IN


def describe_tokenizer(tokenizer: str) -> dict[str, str]:
    """Which tokenizer counts, for reports: `name` (approx, bytes, or the file's name) and
    `kind` (approx, bytes, tokenizer.json or ranks), with the file's `path`."""
    if not is_file_tokenizer(tokenizer):
        return {"name": tokenizer, "kind": tokenizer}
    kind = "tokenizer.json" if tokenizer.endswith(".json") else "ranks"
    return {"name": Path(tokenizer).name, "kind": kind, "path": tokenizer}


@functools.lru_cache(maxsize=8)
def file_tokenizer(path: str) -> FileTokenizer:
    """The tokenizer of a local file (cached: prompts and counters share one)."""
    if path.endswith(".json"):
        return read_tokenizer_json(path)
    return read_ranks(path)


@functools.lru_cache(maxsize=8)
def _word_costs(path: str, words: tuple[str, ...]) -> tuple[tuple[str, int], ...]:
    tok = file_tokenizer(path)
    return tuple((" " + w, tok.count(" " + w)) for w in words)


def text_of_tokens(rng: np.random.Generator, tokens: int, path: str,
                   words: tuple[str, ...]) -> str:
    """Words (each with its leading space: its own pre-token, so counts add up) drawn at
    random among those that fit, until exactly `tokens` tokens; checked by a recount."""
    costs = _word_costs(path, words)
    ones = [w for w, c in costs if c == 1]
    if not ones:
        raise SettingsError([(f"tokenizer: {path}: none of the synthetic words is one token; "
                             "prompts of exact lengths need some")])
    out, left = [], tokens
    while left > 0:
        fit = [(w, c) for w, c in costs if c <= left]
        word, cost = fit[int(rng.integers(len(fit)))]
        out.append(word)
        left -= cost
    text = "".join(out)
    counted = file_tokenizer(path).count(text)
    if counted != tokens:
        raise SettingsError([(f"tokenizer: {path}: words do not count separately "
                             f"({counted} tokens, not {tokens}); its pre-tokenizer must split "
                             "on spaces")])
    return text
