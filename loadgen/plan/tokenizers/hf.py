"""A Hugging Face `tokenizer.json`, through the `tokenizers` library (the optional extra
`tokenizers`: `pip install 'loadgen[tokenizers]'`), imported only when one is named."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.errors import SettingsError

__all__ = ["HfTokenizer", "read_tokenizer_json"]


class HfTokenizer:
    """Counts with a local tokenizer.json, special tokens left out."""

    def __init__(self, name: str, tokenizer: Any) -> None:
        self.name = name
        self._tokenizer = tokenizer

    def count(self, text: str) -> int:
        """Tokens in `text`."""
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)


def read_tokenizer_json(path: str | Path) -> HfTokenizer:
    """The tokenizer of a local tokenizer.json (nothing is downloaded)."""
    try:
        from tokenizers import Tokenizer  # type: ignore[import-not-found,import-untyped,unused-ignore]
    except ImportError:
        raise SettingsError([(f"tokenizer: {path} is a Hugging Face tokenizer.json, which needs "
                             "the optional extra `tokenizers` (pip install "
                             "'loadgen[tokenizers]')")]) from None
    try:
        return HfTokenizer(str(path), Tokenizer.from_file(str(path)))
    except Exception as exc:  # noqa: BLE001 - the library raises untyped errors on a bad file
        raise SettingsError([f"tokenizer: cannot load {str(path)!r}: {exc}"]) from None
