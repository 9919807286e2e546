"""What a dataset loader returns, and how it names a bad row.

A `DatasetRow` is one prompt's text with the lengths the file gives (None when it
gives none: counted, or drawn, later) and the line it came from. A loader reads its
file with `DATASET_FILE` (`read_text`, `json_row`) and refuses a bad row with `bad_row`:
`dataset: FILE:LINE: FIELD: message`.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadgen.plan.inputfile import InputFile

__all__ = ["DATASET_FILE", "DATASET_FORMATS", "DatasetRow", "bad_row", "json_row", "read_text"]

DATASET_FORMATS = ("jsonl", "sharegpt", "lines")


@dataclass(frozen=True, slots=True)
class DatasetRow:
    """One prompt of a dataset."""

    text: str
    line: int
    input_tokens: int | None = None
    output_tokens: int | None = None
    output_text: str | None = None  # a reference answer, counted for the output length


DATASET_FILE = InputFile("dataset")
bad_row, read_text, json_row = DATASET_FILE.bad_row, DATASET_FILE.read_text, DATASET_FILE.json_row
