"""Text from outside made safe where it enters: what a server sends (error messages, reasons)
and what a result file holds may carry lone surrogates (`"\\ud800"` is valid JSON), which no
UTF-8 file, terminal or page can take. `safe_text` keeps such a character visible as its
escape (`\\ud800`); `safe_tree` does it to every string of a JSON value."""

from __future__ import annotations

from typing import Any

__all__ = ["safe_text", "safe_tree"]


def safe_text(text: str) -> str:
    """`text` with each lone surrogate written as its backslash escape (the same object when
    there is none)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode()
    return text


def safe_tree(value: Any) -> Any:
    """A JSON value (dicts, lists, strings, numbers) with `safe_text` applied to every string,
    keys included."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, dict):
        return {safe_text(k) if isinstance(k, str) else k: safe_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [safe_tree(v) for v in value]
    return value
