"""CSV rows with named columns, each with its line number (shared by the CSV trace loaders)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path

from loadgen.errors import SettingsError
from loadgen.plan.traces.rows import MAX_ROWS, bad_row, read_text

__all__ = ["csv_rows"]


def csv_rows(path: str | Path, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, {column: cell}) for each non-empty row; the header must name every column."""
    reader = csv.reader(io.StringIO(read_text(path)))
    header = [h.strip().lstrip("\ufeff") for h in next(reader, None) or []]
    missing = [c for c in columns if c not in header]
    if missing:
        raise SettingsError([(f"trace_file: {path}:1: the header {header!r} lacks "
                             f"{', '.join(missing)}")])
    where = {c: header.index(c) for c in columns}
    for count, row in enumerate(reader):
        if not any(cell.strip() for cell in row):
            continue
        if count >= MAX_ROWS:
            raise bad_row(path, reader.line_num, "row", f"more than {MAX_ROWS} rows")
        for column, index in where.items():
            if index >= len(row):
                raise bad_row(path, reader.line_num, column, "missing")
        yield reader.line_num, {c: row[i] for c, i in where.items()}
