"""Reading arrival traces and saved schedules: untrusted files, checked row by row.

A trace is a CSV file with a header naming a column `offset_s` or `timestamp`
(seconds; `offset_s` wins if both are there), or JSON lines, one object per
line with such a key. Offsets count from the first row and are multiplied by
`time_scale`; rows must be numbers, finite, not negative and sorted (equal
times are fine). Seconds are read as float64: an epoch timestamp keeps about
0.25 us of precision, far below the issue-lag bound.

A saved schedule (`schedule.bin`, written beside a run's result.json) holds the
planned offsets as little-endian int64 ns from the run's start, replayed as
they are: not shifted, not scaled, bit for bit.

Every problem raises `SettingsError` naming the key and, where there is one,
the line.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from pathlib import Path

import numpy as np
import numpy.typing as npt

from loadgen.errors import SettingsError
from loadgen.plan.arrivals import Trace
from loadgen.plan.traces.named import read_named_trace

__all__ = ["COLUMNS", "MAX_ROWS", "SCHEDULE_FILE", "read_schedule", "read_trace"]

COLUMNS = ("offset_s", "timestamp")
MAX_ROWS = 50_000_000
SCHEDULE_FILE = "schedule.bin"
_JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")


def _fail(key: str, message: str) -> SettingsError:
    return SettingsError([f"{key}: {message}"])


def _read_bytes(key: str, path: str | Path) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise _fail(key, f"cannot read {str(path)!r}: {exc.strerror or exc}") from None


def _number(value: object, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _fail("trace_file", f"{where}: {value!r} is not a number")
    try:
        number = float(value)
    except ValueError:
        raise _fail("trace_file", f"{where}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise _fail("trace_file", f"{where}: {value!r} is not finite")
    if number < 0:
        raise _fail("trace_file", f"{where}: {value!r} is negative")
    return number


def _csv_rows(text: str) -> tuple[list[float], list[int]]:
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    names = [h.strip().lstrip("\ufeff") for h in header or []]
    column = next((names.index(c) for c in COLUMNS if c in names), None)
    if column is None:
        raise _fail("trace_file", f"the CSV header {names!r} names no column "
                                  f"{' or '.join(COLUMNS)}")
    values, lines = [], []
    for row in reader:
        if not any(cell.strip() for cell in row):
            continue
        where = f"line {reader.line_num}"
        if len(row) <= column:
            raise _fail("trace_file", f"{where}: no value in column {names[column]!r}")
        values.append(_number(row[column].strip(), where))
        lines.append(reader.line_num)
        if len(values) > MAX_ROWS:
            raise _fail("trace_file", f"more than {MAX_ROWS} rows")
    return values, lines


def _json_rows(text: str) -> tuple[list[float], list[int]]:
    values, lines, key = [], [], None
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _fail("trace_file", f"{where}: not JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise _fail("trace_file", f"{where}: expected an object, got {line.strip()[:40]!r}")
        if key is None:
            key = next((c for c in COLUMNS if c in row), None)
            if key is None:
                raise _fail("trace_file", f"{where}: no key {' or '.join(COLUMNS)}")
        if key not in row:
            raise _fail("trace_file", f"{where}: no key {key!r}")
        values.append(_number(row[key], where))
        lines.append(number)
        if len(values) > MAX_ROWS:
            raise _fail("trace_file", f"more than {MAX_ROWS} rows")
    return values, lines


def _check_sorted(key: str, values: npt.NDArray[np.float64] | npt.NDArray[np.int64],
                  lines: list[int] | None) -> None:
    if values.size == 0:
        raise _fail(key, "the file holds no arrivals")
    back = np.flatnonzero(np.diff(values) < 0)
    if back.size:
        i = int(back[0]) + 1
        where = f"line {lines[i]}" if lines else f"entry {i}"
        raise _fail(key, f"{where}: {values[i]} comes before the previous {values[i - 1]} "
                         "(the trace must be sorted)")


def read_trace(path: str | Path, time_scale: float = 1.0, trace_format: str = "auto",
               block_tokens: int = 512) -> Trace:
    """A trace file as int64 ns offsets from its first row, times `time_scale`
    (`trace_format` names its loader, `traces.named`; `auto` reads it here)."""
    raw = _read_bytes("trace_file", path)
    if trace_format != "auto":
        rows = read_named_trace(path, trace_format, block_tokens)
        _check_sorted("trace_file", rows.seconds, None)
        offsets = np.round((rows.seconds - rows.seconds[0]) * (1e9 * time_scale))
        return Trace(str(path), hashlib.sha256(raw).hexdigest(), offsets.astype(np.int64))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _fail("trace_file", f"not UTF-8 text (byte {exc.start})") from None
    as_json = Path(path).suffix.lower() in _JSON_SUFFIXES or text.lstrip().startswith("{")
    values, lines = _json_rows(text) if as_json else _csv_rows(text)
    seconds = np.asarray(values, dtype=np.float64)
    _check_sorted("trace_file", seconds, lines)
    offsets = np.round((seconds - seconds[0]) * (1e9 * time_scale)).astype(np.int64)
    return Trace(str(path), hashlib.sha256(raw).hexdigest(), offsets)


def read_schedule(path: str | Path) -> Trace:
    """A saved `schedule.bin`: int64 ns offsets from the run's start, as they are."""
    raw = _read_bytes("schedule_file", path)
    if len(raw) % 8:
        raise _fail("schedule_file", f"{len(raw)} bytes is not a whole number of int64 offsets")
    offsets = np.frombuffer(raw, dtype="<i8").astype(np.int64)
    if offsets.size and int(offsets.min()) < 0:
        raise _fail("schedule_file", "holds a negative offset")
    _check_sorted("schedule_file", offsets, None)
    return Trace(str(path), hashlib.sha256(raw).hexdigest(), offsets)
