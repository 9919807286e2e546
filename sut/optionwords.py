"""The values of `key=value` option strings, parsed one way for every option set in `sut`
(`sut.options` for a served model, `sut.llm.config` for the LLM engine).

Each parser takes the key and the raw text and raises `ConfigError` naming the key;
`parse_words` runs a table of them and names an unknown key with the closest known one.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping

from sut.errors import ConfigError

__all__ = ["Parser", "at_least", "auto_flag", "flag", "integer", "number", "parse_words", "word"]

Parser = Callable[[str, str], object]


def integer(key: str, raw: str) -> int:
    """A whole number."""
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(key, f"want an integer, got {raw!r}") from None


def at_least(low: int) -> Callable[[str, str], int]:
    """A parser of whole numbers no smaller than `low`."""
    def parse(key: str, raw: str) -> int:
        value = integer(key, raw)
        if value < low:
            raise ConfigError(key, f"must be >= {low}, got {value}")
        return value

    return parse


def number(key: str, raw: str) -> float:
    """A number."""
    try:
        return float(raw)
    except ValueError:
        raise ConfigError(key, f"want a number, got {raw!r}") from None


def flag(key: str, raw: str) -> bool:
    """true/false, 1/0, yes/no or on/off, in any case."""
    word = raw.strip().lower()
    if word in ("true", "1", "yes", "on"):
        return True
    if word in ("false", "0", "no", "off"):
        return False
    raise ConfigError(key, f"want true or false, got {raw!r}")


def auto_flag(key: str, raw: str) -> bool | None:
    """auto (None: derived from the machine), or a `flag`."""
    return None if raw.strip().lower() == "auto" else flag(key, raw)


def word(key: str, raw: str) -> str:
    """A word, stripped and in lower case; not empty."""
    text = raw.strip().lower()
    if not text:
        raise ConfigError(key, "must not be empty")
    return text


def parse_words(options: Mapping[str, str], parsers: Mapping[str, Parser], what: str,
                known: Iterable[str] | None = None) -> dict[str, object]:
    """Each option parsed by its key's parser; an unknown key (a `what`, one of `known`,
    else of `parsers`) raises ConfigError with the closest known key."""
    names = sorted(known if known is not None else parsers)
    values: dict[str, object] = {}
    for key, raw in options.items():
        parser = parsers.get(key)
        if parser is None:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise ConfigError(key, f"unknown {what}{hint}; known: {', '.join(names)}")
        values[key] = parser(key, raw)
    return values
