"""The byte tokenizer every model here shares: token i < 256 is byte i, then BOS, EOS, PAD.

Text is UTF-8 bytes; decoding is incremental (`Detokenizer`), so a character split across
tokens appears once its last byte has come. A chat is rendered by `chat_prompt`.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Mapping, Sequence

__all__ = ["BOS", "EOS", "PAD", "VOCAB_SIZE", "Detokenizer", "chat_prompt", "decode", "encode"]

BOS, EOS, PAD = 256, 257, 258
VOCAB_SIZE = 259


def encode(text: str, bos: bool = True) -> list[int]:
    """`text` as token ids, BOS first unless `bos` is False."""
    ids = list(text.encode("utf-8"))
    return [BOS, *ids] if bos else ids


def decode(tokens: Iterable[int]) -> str:
    """The text of `tokens`; special tokens are dropped, broken UTF-8 is replaced."""
    return bytes(t for t in tokens if t < 256).decode("utf-8", errors="replace")


def chat_prompt(messages: Sequence[Mapping[str, str]]) -> str:
    """A chat as one prompt: `<|role|>\\ncontent\\n` per message, then `<|assistant|>\\n`."""
    parts = [f"<|{m['role']}|>\n{m['content']}\n" for m in messages]
    return "".join(parts) + "<|assistant|>\n"


class Detokenizer:
    """Turns tokens into text as they come; a split UTF-8 character waits for its last byte."""

    __slots__ = ("_decoder",)

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        """The text `token` completes ("" for a special token or an unfinished character)."""
        if token >= 256:
            return ""
        return str(self._decoder.decode(bytes((token,))))

    def flush(self) -> str:
        """Whatever an unfinished character left (a replacement character), at the end."""
        return str(self._decoder.decode(b"", final=True))
