"""An input file's JSON lines: every non-blank line with its number, a bad one refused naming
the setting, file, line and the field the caller gives."""

from __future__ import annotations

import pytest

from loadgen.errors import SettingsError
from loadgen.plan.inputfile import InputFile

FILE = InputFile("dataset")


def test_json_lines_numbers_each_line_and_skips_blank_ones() -> None:
    text = '{"a": 1}\n\n  \n[2, 3]\n"four"\n'
    assert FILE.json_lines(text, "d.jsonl", "row") == [(1, {"a": 1}), (4, [2, 3]), (5, "four")]


def test_a_line_that_is_not_json_is_refused_naming_its_place() -> None:
    with pytest.raises(SettingsError) as caught:
        FILE.json_lines('{"a": 1}\n{"a": \n{"a": 2}\n', "d.jsonl", "job")
    assert caught.value.problems == ["dataset: d.jsonl:2: job: not JSON: Expecting value"]
