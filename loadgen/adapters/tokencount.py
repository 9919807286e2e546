"""Client-side output token counts, with no tokenizer download: the fallback and the cross-check.

Two counters, chosen by name (`TOKENIZERS`):

* ``approx``: GPT-style. Text is split the way GPT BPE tokenizers pre-tokenize it (a
  word with its leading space, digits in runs of at most three, a run of punctuation, line
  breaks, spaces), then each piece counts one token, a letter run longer than
  `WORD_LETTERS` one more per `WORD_LETTERS` letters past it (BPE splits rare long words),
  and CJK characters one each. English prose comes out within roughly 10% of cl100k-style
  counts (common words are one token each); code and unusual scripts drift further. It is
  an estimate; the server's `usage` is preferred wherever given.
* ``bytes``: one token per UTF-8 byte, exact for the built-in byte-vocabulary model.

`ChunkCounter` counts the text of one streamed chunk (bytes as they came, JSON escapes
already undone), at least one token for any non-empty text (a chunk that carries text
carries a token), and remembers the counts of recent texts: streams repeat a small set of
token texts, so most chunks cost one dictionary lookup. A text that is not valid UTF-8 (or,
decoded, holds a lone surrogate) raises UnicodeError, whichever path read it: the streaming
adapters end that stream as a `protocol_error`.
"""

from __future__ import annotations

import re
from collections.abc import Callable

__all__ = ["TOKENIZERS", "WORD_LETTERS", "ChunkCounter", "count_approx", "count_bytes"]

WORD_LETTERS = 8
CACHE = 65536
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_PIECES = re.compile(
    rf"'(?i:[sdmt]|ll|ve|re)"
    rf"|[{_CJK}]"
    rf"|[^\r\n\w{_CJK}]?(?:(?![{_CJK}])[^\W\d_])+"
    rf"|\d{{1,3}}"
    rf"| ?[^\s\w{_CJK}]+[\r\n]*"
    rf"|\s*[\r\n]+"
    rf"|\s+(?!\S)"
    rf"|\s+")
_LONG = re.compile(rf"(?:(?![{_CJK}])[^\W\d_]){{{WORD_LETTERS + 1},}}")


def count_approx(text: str) -> int:
    """GPT-style token count estimate of `text`."""
    count = len(_PIECES.findall(text))
    for word in _LONG.findall(text):
        count += (len(word) - 1) // WORD_LETTERS
    return count


def count_bytes(text: str) -> int:
    """Tokens of a byte-vocabulary model: UTF-8 bytes."""
    return len(text.encode())


TOKENIZERS: dict[str, Callable[[str], int]] = {"approx": count_approx, "bytes": count_bytes}
"""Client token counters by name (the `tokenizer=` option of the streaming adapters)."""


class ChunkCounter:
    """Token counts of chunk texts, remembered."""

    __slots__ = ("_count", "_raw_bytes", "known")

    def __init__(self, tokenizer: str = "approx") -> None:
        if tokenizer not in TOKENIZERS:
            raise ValueError(f"tokenizer {tokenizer!r}: expected one of {', '.join(TOKENIZERS)}")
        self._count = TOKENIZERS[tokenizer]
        self._raw_bytes = tokenizer == "bytes"
        self.known: dict[bytes, int] = {}
        """Counts of the texts met lately (a caller may look up many at once)."""

    def count(self, text: bytes) -> int:
        """Tokens in one chunk's UTF-8 text: at least 1 when it is not empty; UnicodeError
        when it is not UTF-8."""
        cached = self.known.get(text)
        if cached is not None:
            return cached
        decoded = text.decode()  # strict: text that is not UTF-8 is no stream's (UnicodeError)
        n = len(text) if self._raw_bytes else self._count(decoded)
        n = max(n, 1) if text else 0
        if len(self.known) >= CACHE:
            self.known.clear()
        self.known[text] = n
        return n

    def count_text(self, text: str) -> int:
        """The same for a decoded string (UnicodeError for a lone surrogate)."""
        return self.count(text.encode())
