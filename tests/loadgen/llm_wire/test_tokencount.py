"""Client token counts: the GPT-style estimate, exact bytes, and the chunk counter's floor."""

from __future__ import annotations

import pytest

from loadgen.adapters.tokencount import ChunkCounter, count_approx, count_bytes


@pytest.mark.parametrize(("text", "tokens"), [
    ("", 0),
    (" hello", 1),
    ("Hello world", 2),
    ("The quick brown fox jumps over the lazy dog.", 10),  # cl100k: 10
    ("1234567", 3),  # digits in threes
    ("你好世界", 4),  # CJK: one per character
    ("don't", 2),  # contraction apart
    (" internationalization", 3),  # a long rare word: one more per 8 letters past 8
])
def test_approx_counts(text: str, tokens: int) -> None:
    assert count_approx(text) == tokens


def test_bytes_counts_utf8_bytes() -> None:
    assert count_bytes("aé") == 3


def test_a_chunk_with_text_carries_at_least_one_token() -> None:
    counter = ChunkCounter("approx")
    assert counter.count(b"") == 0
    assert counter.count(b" ") == 1
    assert counter.count(b"hello world") == 2
    assert counter.count(b"hello world") == 2  # remembered


def test_bytes_counter_and_unknown_names() -> None:
    assert ChunkCounter("bytes").count("é!".encode()) == 3
    with pytest.raises(ValueError, match="approx, bytes"):
        ChunkCounter("gpt9")
