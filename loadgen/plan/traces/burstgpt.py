"""BurstGPT trace (CSV): `Timestamp` (s), `Request tokens`, `Response tokens` (and more columns).

A row whose `Response tokens` is 0 (a request that failed in the original) is
replayed asking one token, so the trace's arrivals stay whole.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loadgen.plan.traces.csvrows import csv_rows
from loadgen.plan.traces.rows import TraceRows, count_field, seconds_field

__all__ = ["read_burstgpt"]

_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")


def read_burstgpt(path: str | Path) -> TraceRows:
    """The rows of a BurstGPT CSV."""
    seconds, inputs, outputs = [], [], []
    for line, row in csv_rows(path, _COLUMNS):
        seconds.append(seconds_field(row["Timestamp"], path, line, "Timestamp"))
        inputs.append(count_field(row["Request tokens"], path, line, "Request tokens"))
        outputs.append(max(count_field(row["Response tokens"], path, line, "Response tokens",
                                       least=0), 1))
    return TraceRows(np.asarray(seconds, dtype=np.float64), np.asarray(inputs, dtype=np.int64),
                     np.asarray(outputs, dtype=np.int64))
