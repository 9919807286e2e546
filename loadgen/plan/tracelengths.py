"""Token lengths carried by an arrival trace: query i of a trace replay asks row i's lengths.

A trace file (CSV or JSON lines, see `tracefile`) may name `input_tokens` and
`output_tokens` beside its time column; then a token run replays both, each
request's time and its lengths together. Rows with a time but no lengths are an
error naming the line.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from loadgen.errors import SettingsError

__all__ = ["LENGTH_COLUMNS", "TraceLengths", "read_trace_lengths"]

LENGTH_COLUMNS = ("input_tokens", "output_tokens")
_JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")


@dataclass(frozen=True, slots=True)
class TraceLengths:
    """Per trace row: input and output tokens (rows in file order)."""

    input_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]


def _count(value: object, where: str, key: str) -> int:
    try:
        number = int(str(value).strip()) if isinstance(value, str) else value
    except ValueError:
        number = None
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise SettingsError([f"trace_file: {where}: {key} {value!r} is not a positive integer"])
    return number


def _rows(text: str, as_json: bool) -> list[tuple[str, dict[str, object]]]:
    if as_json:
        return [(f"line {n}", json.loads(line)) for n, line in enumerate(text.splitlines(), 1)
                if line.strip()]
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames:
        reader.fieldnames = [f.strip().lstrip("\ufeff") for f in reader.fieldnames]
    return [(f"line {reader.line_num}", dict(row)) for row in reader
            if any((v or "").strip() for v in row.values() if isinstance(v, str))]


def read_trace_lengths(path: str | Path) -> TraceLengths | None:
    """The lengths a trace carries, or None when it names neither length column.

    Call after `read_trace` has checked the file's times; a row lacking a named
    length raises SettingsError naming its line.
    """
    text = Path(path).read_text(encoding="utf-8")
    as_json = Path(path).suffix.lower() in _JSON_SUFFIXES or text.lstrip().startswith("{")
    rows = _rows(text, as_json)
    named = [k for k in LENGTH_COLUMNS if rows and k in rows[0][1]]
    if len(named) < len(LENGTH_COLUMNS):
        if named:
            missing = next(k for k in LENGTH_COLUMNS if k not in named)
            raise SettingsError([(f"trace_file: names {named[0]} but not {missing}: "
                                 "a trace carries both lengths or neither")])
        return None
    inputs, outputs = [], []
    for where, row in rows:
        inputs.append(_count(row.get("input_tokens"), where, "input_tokens"))
        outputs.append(_count(row.get("output_tokens"), where, "output_tokens"))
    return TraceLengths(np.asarray(inputs, dtype=np.int64), np.asarray(outputs, dtype=np.int64))
