"""Mooncake trace (JSON lines): `timestamp` (ms), `input_length`, `output_length`, `hash_ids`.

As published by Mooncake (FAST '25): each row's `hash_ids` name the prompt's
blocks of `trace_block_tokens` tokens (512 in the published trace), chained, so
two rows with equal leading ids share that prefix. The last block may be partial.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from loadgen.plan.traces.rows import (
    MAX_ROWS,
    TraceRows,
    bad_row,
    count_field,
    json_row,
    read_text,
    seconds_field,
)

__all__ = ["read_mooncake"]


def _hash_ids(value: object, path: str | Path, line: int) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in value):
        raise bad_row(path, line, "hash_ids", "expected a list of whole numbers >= 0")
    return tuple(value)


def read_mooncake(path: str | Path, block_tokens: int) -> TraceRows:
    """The rows of a Mooncake JSONL trace; `block_tokens` checks `hash_ids` against lengths."""
    seconds: list[float] = []
    inputs: list[int] = []
    outputs: list[int] = []
    blocks: list[tuple[int, ...]] = []
    for line, text in enumerate(read_text(path).splitlines(), start=1):
        if not text.strip():
            continue
        row = json_row(text, path, line)
        for field in ("timestamp", "input_length", "output_length", "hash_ids"):
            if field not in row:
                raise bad_row(path, line, field, "missing")
        seconds.append(seconds_field(row["timestamp"], path, line, "timestamp") / 1000.0)
        length = count_field(row["input_length"], path, line, "input_length")
        ids = _hash_ids(row["hash_ids"], path, line)
        if len(ids) != -(-length // block_tokens):
            raise bad_row(path, line, "hash_ids",
                          f"{len(ids)} blocks, but input_length {length} needs "
                          f"{-(-length // block_tokens)} of {block_tokens} tokens")
        inputs.append(length)
        outputs.append(count_field(row["output_length"], path, line, "output_length"))
        blocks.append(ids)
        if len(seconds) > MAX_ROWS:
            raise bad_row(path, line, "row", f"more than {MAX_ROWS} rows")
    return TraceRows(np.asarray(seconds, dtype=np.float64), np.asarray(inputs, dtype=np.int64),
                     np.asarray(outputs, dtype=np.int64), tuple(blocks))
