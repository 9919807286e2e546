"""What a named trace loader returns, and how it names a bad row.

`TraceRows` holds, per row in file order, the arrival time in seconds, the input
and output token lengths and (Mooncake only) the row's `hash_ids`. A loader
reads its file with `TRACE_FILE` (`read_text`, `json_row`) and refuses a bad row with
`bad_row`: `trace_file: FILE:LINE: FIELD: message`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from loadgen.plan.inputfile import InputFile

__all__ = ["MAX_ROWS", "TRACE_FILE", "TraceRows", "bad_row", "count_field", "json_row",
           "read_text", "seconds_field"]

MAX_ROWS = 50_000_000


@dataclass(frozen=True, slots=True)
class TraceRows:
    """A named trace's rows: times (s), token lengths and optional prefix block ids."""

    seconds: npt.NDArray[np.float64]
    input_tokens: npt.NDArray[np.int64]
    output_tokens: npt.NDArray[np.int64]
    hash_ids: tuple[tuple[int, ...], ...] | None = None


TRACE_FILE = InputFile("trace_file")
bad_row, read_text, json_row = TRACE_FILE.bad_row, TRACE_FILE.read_text, TRACE_FILE.json_row


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
