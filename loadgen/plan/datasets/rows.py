"""What a dataset loader returns, and how it names a bad row.

A `DatasetRow` is one prompt's text with the lengths the file gives (None when it
gives none: counted, or drawn, later) and the line it came from. A loader refuses a
bad row with `bad_row`: `dataset: FILE:LINE: FIELD: message`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.errors import SettingsError
from loadgen.plan.inputfile import json_object, read_input_text, row_error

__all__ = ["DATASET_FORMATS", "DatasetRow", "bad_row", "json_row", "read_text"]

DATASET_FORMATS = ("jsonl", "sharegpt", "lines")


@dataclass(frozen=True, slots=True)
class DatasetRow:
    """One prompt of a dataset."""

    text: str
    line: int
    input_tokens: int | None = None
    output_tokens: int | None = None
    output_text: str | None = None  # a reference answer, counted for the output length


def bad_row(path: str | Path, line: int, field: str, message: str) -> SettingsError:
    """The error for one bad row."""
    return row_error("dataset", path, line, field, message)


def read_text(path: str | Path) -> str:
    """The file as UTF-8 text (a SettingsError naming it when it cannot be read)."""
    return read_input_text("dataset", path)


def json_row(text: str, path: str | Path, line: int) -> dict[str, Any]:
    """One JSONL row, which must be a JSON object."""
    return json_object("dataset", text, path, line)
