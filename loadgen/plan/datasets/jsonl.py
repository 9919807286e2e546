"""Generic JSON lines: `prompt` (or `text`) or `messages` ([{role, content}, ...], their
contents joined by newlines), optional `input_tokens` and `output_tokens`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.errors import SettingsError
from loadgen.plan.datasets.rows import DatasetRow, bad_row, json_row, read_text

__all__ = ["MAX_PROBLEMS", "read_jsonl"]

MAX_PROBLEMS = 5


def _count(row: dict[str, Any], key: str, path: str | Path, line: int) -> int | None:
    value = row.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise bad_row(path, line, key, f"{value!r} is not a whole number >= 1")
    return value


def _text(row: dict[str, Any], path: str | Path, line: int) -> str:
    if "messages" in row:
        messages = row["messages"]
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("content"), str) for m in messages):
            raise bad_row(path, line, "messages", "expected a list of {role, content} objects")
        return "\n".join(m["content"] for m in messages)
    text = row.get("prompt", row.get("text"))
    if not isinstance(text, str):
        raise bad_row(path, line, "prompt", "needs a string 'prompt' (or 'text', 'messages')")
    return text


def _row(text: str, path: str | Path, line: int) -> DatasetRow:
    row = json_row(text, path, line)
    return DatasetRow(_text(row, path, line), line, _count(row, "input_tokens", path, line),
                      _count(row, "output_tokens", path, line))


def read_jsonl(path: str | Path) -> list[DatasetRow]:
    """The rows of a JSON-lines prompt file (the first `MAX_PROBLEMS` bad rows named at once)."""
    rows, problems = [], []
    for line, text in enumerate(read_text(path).splitlines(), start=1):
        if not text.strip():
            continue
        try:
            rows.append(_row(text, path, line))
        except SettingsError as exc:
            problems += exc.problems
            if len(problems) >= MAX_PROBLEMS:
                break
    if problems:
        raise SettingsError(problems)
    return rows
