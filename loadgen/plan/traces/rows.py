"""What a named trace loader returns, and how it names a bad row.

`TraceRows` holds, per row in file order, the arrival time in seconds, the input
and output token lengths and (Mooncake only) the row's `hash_ids`. A loader
refuses a bad row with `bad_row`, which names the file, the line and the field.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from loadgen.errors import SettingsError
from loadgen.plan.inputfile import json_object, read_input_text, row_error

__all__ = ["MAX_ROWS", "TraceRows", "bad_row", "count_field", "json_row", "read_text",
           "seconds_field"]

MAX_ROWS = 50_000_000


@dataclass(frozen=True, slots=True)
class TraceRows:
    """A named trace's rows: times (s), token lengths and optional prefix block ids."""

    seconds: npt.NDArray[np.float64]
    input_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    hash_ids: tuple[tuple[int, ...], ...] | None = None


def bad_row(path: str | Path, line: int, field: str, message: str) -> SettingsError:
    """The error for one bad row: `trace_file: FILE:LINE: FIELD: message`."""
    return row_error("trace_file", path, line, field, message)


def read_text(path: str | Path) -> str:
    """The file as UTF-8 text (a SettingsError naming it when it cannot be read)."""
    return read_input_text("trace_file", path)


def json_row(text: str, path: str | Path, line: int) -> dict[str, Any]:
    """One JSONL row, which must be a JSON object."""
    return json_object("trace_file", text, path, line)


def seconds_field(value: object, path: str | Path, line: int, field: str) -> float:
    """A finite, non-negative number of seconds (or any unit the caller scales)."""
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise bad_row(path, line, field, f"{value!r} is not a number") from None
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value) or value < 0:
        raise bad_row(path, line, field, f"{value!r} is not a finite number >= 0")
    return float(value)


def count_field(value: object, path: str | Path, line: int, field: str, least: int = 1) -> int:
    """A whole token count of at least `least`."""
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise bad_row(path, line, field, f"{value!r} is not a whole number") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise bad_row(path, line, field, f"{value!r} is not a whole number >= {least}")
    return value
