"""What a dataset loader returns, and how it names a bad row.

A `DatasetRow` is one prompt's text with the lengths the file gives (None when it
gives none: counted, or drawn, later) and the line it came from. A loader refuses a
bad row with `bad_row`: `dataset: FILE:LINE: FIELD: message`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadgen.errors import SettingsError

__all__ = ["DATASET_FORMATS", "DatasetRow", "bad_row", "read_text"]

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
    return SettingsError([f"dataset: {path}:{line}: {field}: {message}"])


def read_text(path: str | Path) -> str:
    """The file as UTF-8 text (a SettingsError naming it when it cannot be read)."""
    try:
        return Path(path).read_bytes().decode("utf-8")
    except OSError as exc:
        raise SettingsError([(f"dataset: cannot read {str(path)!r}: "
                             f"{exc.strerror or exc}")]) from None
    except UnicodeDecodeError as exc:
        raise SettingsError([f"dataset: {path}: not UTF-8 text (byte {exc.start})"]) from None
