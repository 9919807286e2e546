"""A tiktoken-style BPE ranks file, read and applied by our own small encoder.

The file has one `BASE64_BYTES RANK` pair a line (as tiktoken's `.tiktoken` files). Text
is pre-split GPT-style (contractions, a letter run with its leading space, digits in
runs of at most three, punctuation runs, whitespace) and each piece's UTF-8 bytes are
merged pairwise, lowest rank first, until no adjacent pair is a token. Every single byte
must have a rank. Counts are exact for a ranks file used with this pre-split pattern;
tiktoken's own patterns differ slightly on unusual scripts.
"""

from __future__ import annotations

import base64
import binascii
import re
from pathlib import Path

from loadgen.errors import SettingsError

__all__ = ["RanksTokenizer", "read_ranks"]

PIECES = re.compile(r"'(?i:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d{1,3}| ?[^\s\w]+[\r\n]*|\s*[\r\n]+"
                    r"|\s+(?!\S)|\s+")


class RanksTokenizer:
    """Byte-pair encoding over a ranks table."""

    def __init__(self, name: str, ranks: dict[bytes, int]) -> None:
        self.name = name
        self.ranks = ranks
        self._pieces: dict[str, int] = {}

    def _merge(self, piece: bytes) -> int:
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            best, at = None, -1
            for i in range(len(parts) - 1):
                rank = self.ranks.get(parts[i] + parts[i + 1])
                if rank is not None and (best is None or rank < best):
                    best, at = rank, i
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        return len(parts)

    def count(self, text: str) -> int:
        """Tokens in `text`."""
        total = 0
        for piece in PIECES.findall(text):
            n = self._pieces.get(piece)
            if n is None:
                n = self._pieces[piece] = self._merge(piece.encode())
            total += n
        return total


def read_ranks(path: str | Path) -> RanksTokenizer:
    """A ranks file as a tokenizer; a bad line is refused naming file, line and field."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError([f"tokenizer: cannot read {str(path)!r}: {exc}"]) from None
    ranks: dict[bytes, int] = {}
    for line, row in enumerate(text.splitlines(), start=1):
        if not row.strip():
            continue
        cells = row.split()
        if len(cells) != 2 or not cells[1].isdigit():
            raise SettingsError([f"tokenizer: {path}:{line}: rank: expected 'BASE64 RANK'"])
        try:
            token = base64.b64decode(cells[0], validate=True)
        except (binascii.Error, ValueError):
            raise SettingsError([f"tokenizer: {path}:{line}: token: not base64"]) from None
        ranks[token] = int(cells[1])
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise SettingsError([(f"tokenizer: {path}: {len(missing)} single bytes have no rank "
                             f"(first {missing[0]}): not a byte-level BPE ranks file")])
    return RanksTokenizer(str(path), ranks)
