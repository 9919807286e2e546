"""The LLM server's field checks: every value from a request body, before the engine sees it.

Numbers are finite and in range (JSON lets through `NaN`, `Infinity` and integers of any size;
none may reach the sampler); a seed fits 64 bits. Text is valid Unicode (a lone surrogate such
as `"\\ud800"` cannot be encoded). Stop strings are bounded in count and length, so one request
cannot make every step slow. Fields the engine does not implement are refused, never silently
ignored. Each failure is an `InvalidInput` whose message starts with the field's name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from sut.errors import InvalidInput

__all__ = [
    "MAX_STOP_CHARS",
    "MAX_STOP_STRINGS",
    "flag",
    "integer",
    "number",
    "refuse_unsupported",
    "shown",
    "stop_strings",
    "text",
]

MAX_STOP_STRINGS = 64
MAX_STOP_CHARS = 256
_INT64 = 2**63
# field -> values that mean "not asked for" (what clients send by default)
_UNSUPPORTED: dict[str, tuple[object, ...]] = {
    "logprobs": (None, False), "top_logprobs": (None, 0), "echo": (None, False),
    "best_of": (None, 1), "n": (None, 1),
}


def number(body: Mapping[str, Any], key: str, default: float,
           low: float = -math.inf, high: float = math.inf) -> float:
    """A finite number in [low, high] (null: `default`)."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{key}: want a number, got {shown(value)}")
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        raise InvalidInput(f"{key}: {shown(value)} is out of range")
    if not math.isfinite(value) or not low <= value <= high:
        raise InvalidInput(f"{key}: want a finite number in [{low}, {high}], got {value!r}")
    return float(value)


def integer(body: Mapping[str, Any], key: str, default: int,
            low: int = -_INT64, high: int = _INT64 - 1) -> int:
    """An integer in [low, high] (an integral float counts; null: `default`)."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() \
            and abs(value) < _INT64:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{key}: want an integer, got {shown(value)}")
    if not low <= value <= high:
        raise InvalidInput(f"{key}: want an integer in [{low}, {high}], got {shown(value)}")
    return value


def flag(body: Mapping[str, Any], key: str) -> bool:
    """true or false (absent or null: false)."""
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidInput(f"{key}: want true or false, got {shown(value)}")
    return value


def text(value: Any, field: str) -> str:
    """`value` as a string that encodes to UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        raise InvalidInput(f"{field}: want a string, got {shown(value)}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(f"{field}: not valid Unicode (a lone surrogate?)") from None
    return value


def stop_strings(value: Any) -> tuple[str, ...]:
    """`stop`: a string or a list of at most `MAX_STOP_STRINGS` strings of at most
    `MAX_STOP_CHARS` characters; empty strings are dropped."""
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise InvalidInput(f"stop: want a string or a list of strings, got {shown(value)}")
    if len(items) > MAX_STOP_STRINGS:
        raise InvalidInput(f"stop: {len(items)} strings, at most {MAX_STOP_STRINGS} allowed")
    out = tuple(text(s, "stop") for s in items)
    if any(len(s) > MAX_STOP_CHARS for s in out):
        raise InvalidInput(f"stop: a string is longer than {MAX_STOP_CHARS} characters")
    return tuple(s for s in out if s)


def refuse_unsupported(body: Mapping[str, Any]) -> None:
    """400 for `n` != 1 and for `logprobs`, `top_logprobs`, `echo`, `best_of` asked for."""
    for key, defaults in _UNSUPPORTED.items():
        value = body.get(key)
        if not any(value is d or (type(value) is type(d) and value == d) for d in defaults):
            raise InvalidInput(f"{key}: {shown(value)} is not supported by this server"
                               f" (only {' or '.join(map(_json_word, defaults))})")


def _json_word(value: object) -> str:
    return json.dumps(value)


def shown(value: Any) -> str:
    """A value for an error message, at most 40 characters."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, list | dict):
        return f"a {type(value).__name__}"
    out = ascii(value[:41]) if isinstance(value, str) else repr(value)
    return out if len(out) <= 40 else out[:37] + "..."
