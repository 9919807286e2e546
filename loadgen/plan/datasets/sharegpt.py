"""ShareGPT JSON: a list of `{"conversations": [{"from": "human", "value": ...},
{"from": "gpt", "value": ...}, ...]}` (or the same objects as JSON lines).

The first human turn is the prompt, the answer after it its reference: its token
length is the output length asked. For multi-turn sessions (`dataset_turns`) every human
turn with an answer after it is one turn of the conversation's session, in order. A conversation with no human turn followed by
an answer is skipped (as peers do); a malformed one is refused naming its line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loadgen.plan.datasets.rows import DATASET_FILE, DatasetRow, bad_row, read_text

__all__ = ["read_sharegpt", "read_sharegpt_conversations"]

_HUMAN = ("human", "user")


def _objects(text: str, path: str | Path) -> list[tuple[int, Any]]:
    """(line, object) of a JSON array's elements, or of JSON lines."""
    decoder = json.JSONDecoder()
    start = len(text) - len(text.lstrip())
    if text[start:start + 1] != "[":
        return DATASET_FILE.json_lines(text, path, "row")
    out: list[tuple[int, Any]] = []
    pos = start + 1
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "]":
            return out
        line = text.count("\n", 0, pos) + 1
        try:
            obj, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise bad_row(path, text.count("\n", 0, exc.pos) + 1, "row",
                          f"not JSON: {exc.msg}") from None
        out.append((line, obj))


def _turn(turn: Any, path: str | Path, line: int) -> tuple[str, str]:
    if not isinstance(turn, dict) or not isinstance(turn.get("from"), str) \
            or not isinstance(turn.get("value"), str):
        raise bad_row(path, line, "conversations", "each turn needs string 'from' and 'value'")
    return turn["from"], turn["value"]


def _read(path: str | Path) -> list[tuple[int, list[tuple[str, str]]]]:
    """(line, turns) of each conversation, checked."""
    out = []
    for line, obj in _objects(read_text(path), path):
        if not isinstance(obj, dict) or not isinstance(obj.get("conversations"), list):
            raise bad_row(path, line, "conversations", "expected an object with a list "
                                                       "'conversations'")
        out.append((line, [_turn(t, path, line) for t in obj["conversations"]]))
    return out


def read_sharegpt(path: str | Path) -> list[DatasetRow]:
    """The first human turn of each conversation, with its answer as the reference."""
    rows = []
    for line, turns in _read(path):
        first = next((i for i, (who, _) in enumerate(turns) if who in _HUMAN), None)
        if first is None or first + 1 >= len(turns) or not turns[first][1]:
            continue
        rows.append(DatasetRow(turns[first][1], line, output_text=turns[first + 1][1]))
    return rows


def read_sharegpt_conversations(path: str | Path) -> list[list[DatasetRow]]:
    """Each conversation's human turns in order, each with the answer after it as its
    reference (a human turn with no answer after it, or empty, is left out; a conversation
    left with none is skipped)."""
    conversations = []
    for line, turns in _read(path):
        rows = [DatasetRow(text, line, output_text=turns[i + 1][1])
                for i, (who, text) in enumerate(turns[:-1])
                if who in _HUMAN and text and turns[i + 1][0] not in _HUMAN]
        if rows:
            conversations.append(rows)
    return conversations
