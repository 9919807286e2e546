"""Each named trace format loads from a file the test writes (times, lengths, hash blocks),
replays its times through `read_trace` with `time_scale`, and refuses a malformed row naming
the file, the line and the field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.errors import SettingsError
from loadgen.plan.tracefile import read_trace
from loadgen.plan.traces.named import read_named_trace

MOONCAKE = [{"timestamp": 0, "input_length": 1100, "output_length": 5, "hash_ids": [0, 1, 2]},
            {"timestamp": 250, "input_length": 512, "output_length": 7, "hash_ids": [0]},
            {"timestamp": 1000, "input_length": 700, "output_length": 3, "hash_ids": [3, 4]}]
AZURE = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
         "2023-11-16 18:15:46.6805900,374,44\n"
         "2023-11-16 18:15:47.1805900,396,109\n"
         "2023-11-16 18:15:49.0000000,879,22\n")
BURSTGPT = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n"
            "45,ChatGPT,1087,0,1087,Conversation log\n"
            "118,GPT-4,417,276,693,API log\n")


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _mooncake(tmp_path: Path, rows: list[dict[str, object]]) -> Path:
    return _write(tmp_path, "trace.jsonl", "".join(json.dumps(r) + "\n" for r in rows))


def test_mooncake_rows_times_and_blocks(tmp_path: Path) -> None:
    path = _mooncake(tmp_path, MOONCAKE)
    rows = read_named_trace(path, "mooncake", 512)
    assert rows.seconds.tolist() == [0.0, 0.25, 1.0]  # milliseconds in the file
    assert rows.input_tokens.tolist() == [1100, 512, 700]
    assert rows.output_tokens.tolist() == [5, 7, 3]
    assert rows.hash_ids == ((0, 1, 2), (0,), (3, 4))
    trace = read_trace(path, 2.0, "mooncake", 512)
    assert trace.offsets_ns.tolist() == [0, 500_000_000, 2_000_000_000]


def test_azure_rows(tmp_path: Path) -> None:
    path = _write(tmp_path, "azure.csv", AZURE)
    rows = read_named_trace(path, "azure", 512)
    assert np.allclose(rows.seconds - rows.seconds[0], [0.0, 0.5, 2.31941])
    assert rows.input_tokens.tolist() == [374, 396, 879]
    assert rows.output_tokens.tolist() == [44, 109, 22]
    assert rows.hash_ids is None
    offsets = read_trace(path, 0.5, "azure").offsets_ns  # epoch float64: ~0.25 us precision
    assert np.abs(offsets - [0, 250_000_000, 1_159_705_000]).max() < 1_000


def test_burstgpt_rows(tmp_path: Path) -> None:
    rows = read_named_trace(_write(tmp_path, "burst.csv", BURSTGPT), "burstgpt", 512)
    assert rows.seconds.tolist() == [5.0, 45.0, 118.0]
    assert rows.input_tokens.tolist() == [472, 1087, 417]
    assert rows.output_tokens.tolist() == [18, 1, 276]  # a failed row (0) asks one token


@pytest.mark.parametrize(("row", "field"), [
    ({"input_length": 10, "output_length": 1, "hash_ids": [9]}, "timestamp"),
    ({"timestamp": "soon", "input_length": 10, "output_length": 1, "hash_ids": [9]},
     "timestamp"),
    ({"timestamp": 1, "input_length": 0, "output_length": 1, "hash_ids": [9]}, "input_length"),
    ({"timestamp": 1, "input_length": 10, "output_length": 2.5, "hash_ids": [9]},
     "output_length"),
    ({"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": "9"}, "hash_ids"),
    ({"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [9]}, "hash_ids"),
])
def test_mooncake_bad_row_names_file_line_field(tmp_path: Path, row: dict[str, object],
                                                field: str) -> None:
    path = _mooncake(tmp_path, [*MOONCAKE[:2], row])
    with pytest.raises(SettingsError, match=rf"{path}:3: {field}: "):
        read_named_trace(path, "mooncake", 512)


@pytest.mark.parametrize(("fmt", "text", "bad", "field"), [
    ("azure", AZURE, "2023-11-16 18:15:47.1805900,396,109", "2023-11-16 nope,396,109"),
    ("azure", AZURE, "2023-11-16 18:15:49.0000000,879,22", "2023-11-16 18:15:49.0,879,-3"),
    ("burstgpt", BURSTGPT, "45,ChatGPT,1087,0", "45,ChatGPT,many,0"),
    ("burstgpt", BURSTGPT, "118,GPT-4,417,276", "118,GPT-4,417,"),
])
def test_csv_bad_row_names_file_line_field(tmp_path: Path, fmt: str, text: str, bad: str,
                                           field: str) -> None:
    line = 1 + text.splitlines().index(next(x for x in text.splitlines() if x.startswith(bad)))
    broken = text.replace(bad, field)
    column = {("azure", 0): "TIMESTAMP", ("azure", 1): "GeneratedTokens",
              ("burstgpt", 0): "Request tokens", ("burstgpt", 1): "Response tokens"}
    name = column[fmt, int("nope" not in field and "many" not in field)]
    path = _write(tmp_path, f"{fmt}.csv", broken)
    with pytest.raises(SettingsError, match=rf"{path}:{line}: {name}: "):
        read_named_trace(path, fmt, 512)


def test_a_header_without_the_columns_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "azure.csv", "time,ctx,gen\n1,2,3\n")
    with pytest.raises(SettingsError, match="lacks TIMESTAMP, ContextTokens, GeneratedTokens"):
        read_named_trace(path, "azure", 512)
