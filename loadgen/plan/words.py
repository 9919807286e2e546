"""Synthetic prompt text: common short words, each one token under `approx`, cut to bytes
under `bytes`; and the plan's token counts of a text under those two tokenizers."""

from __future__ import annotations

import re

import numpy as np

from loadgen.plan.tokenizers.load import file_tokenizer, is_file_tokenizer, text_of_tokens

__all__ = ["count_tokens", "cut_tokens", "synthetic_text"]

_WORD_TEXT = (
    "the of and to in is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "more can out other into some time could them than its only new about also two may then do "
    "first any my now such like our over man me even most made after what many before must "
    "through back years much where your way well down should because each just those people how "
    "too little state good very make world still own see men work long get here between both "
    "life being under never day same another know while last might us great old year off come "
    "since against go came right used take three")
_WORDS = tuple(_WORD_TEXT.split())
_PIECES = re.compile(r"\w+|[^\w\s]")


def count_tokens(text: str, tokenizer: str) -> int:
    """Tokens in `text`: `approx` counts words and punctuation marks, `bytes` UTF-8 bytes,
    a file tokenizer (a path, `plan.tokenizers`) its own count."""
    if tokenizer == "bytes":
        return len(text.encode())
    if is_file_tokenizer(tokenizer):
        return file_tokenizer(tokenizer).count(text)
    return len(_PIECES.findall(text))


def synthetic_text(rng: np.random.Generator, tokens: int, tokenizer: str) -> str:
    """Text of exactly `tokens` tokens under `tokenizer`: words, each with a leading space."""
    if tokens <= 0:
        return ""
    if is_file_tokenizer(tokenizer):
        return text_of_tokens(rng, tokens, tokenizer, _WORDS)
    picks = rng.integers(0, len(_WORDS), tokens)
    text = "".join(" " + _WORDS[i] for i in picks.tolist())
    return text[:tokens] if tokenizer == "bytes" else text


def cut_tokens(text: str, tokens: int, tokenizer: str) -> str:
    """The start of `text` holding at most `tokens` tokens under `tokenizer` (`bytes`: whole
    characters only, so a multi-byte character at the cut is left out)."""
    if tokenizer == "bytes":
        return text.encode()[:tokens].decode("utf-8", "ignore")
    ends = [m.end() for m in _PIECES.finditer(text)]
    return text if len(ends) <= tokens else text[:ends[tokens - 1]] if tokens else ""
