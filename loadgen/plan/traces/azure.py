"""Azure LLM inference trace (CSV): `TIMESTAMP`, `ContextTokens`, `GeneratedTokens`.

`TIMESTAMP` is a date and time such as `2023-11-16 18:15:46.6805900` (UTC, fractions
beyond microseconds dropped); arrivals count from the first row.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from loadgen.plan.traces.csvrows import csv_rows
from loadgen.plan.traces.rows import TraceRows, bad_row, count_field

__all__ = ["read_azure"]

_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _epoch_seconds(value: str, path: str | Path, line: int) -> float:
    text = value.strip()
    head, dot, fraction = text.partition(".")
    if dot:
        text = f"{head}.{fraction[:6]}"
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise bad_row(path, line, "TIMESTAMP", f"{value!r} is not a date and time") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=UTC)
    return stamp.timestamp()


def read_azure(path: str | Path) -> TraceRows:
    """The rows of an Azure LLM inference trace CSV."""
    seconds, inputs, outputs = [], [], []
    for line, row in csv_rows(path, _COLUMNS):
        seconds.append(_epoch_seconds(row["TIMESTAMP"], path, line))
        inputs.append(count_field(row["ContextTokens"], path, line, "ContextTokens"))
        outputs.append(count_field(row["GeneratedTokens"], path, line, "GeneratedTokens"))
    return TraceRows(np.asarray(seconds, dtype=np.float64), np.asarray(inputs, dtype=np.int64),
                     np.asarray(outputs, dtype=np.int64))
