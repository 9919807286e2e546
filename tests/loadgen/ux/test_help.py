"""--help reads for users: every subcommand says what it does, what it writes and how to
start; every SUT spec kind in SPEC_FORMS is listed at the top and under each --sut."""

from __future__ import annotations

import pytest

from loadgen.adapters.registry import SPEC_FORMS
from loadgen.cli.main import main

KINDS = [form.split(":")[0].split("[")[0] for form in SPEC_FORMS.split(" | ")]


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as done:
        main([*argv, "--help"])
    assert done.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # one line, single spaces


def test_spec_forms_name_every_kind() -> None:
    assert {"null", "sim", "builtin", "http", "grpc"} <= set(KINDS)


def test_top_level_help_describes_the_tool(capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys)
    assert text.count("Measure an inference server") == 1
    assert "parse, build settings" not in text  # the tool, not the code
    for form in SPEC_FORMS.split(" | "):
        assert form in text, form
    assert "Start here: loadgen run scenarios/server.toml" in text
    assert "User guide: docs/guide.md" in text and "Exit codes:" in text


@pytest.mark.parametrize("command", ["run", "find-peak", "sweep"])
def test_each_sut_option_lists_every_spec_kind(command: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, command)
    sut = text.split("--sut SPEC")[-1]
    for kind in KINDS:
        assert kind in sut, (command, kind)


@pytest.mark.parametrize(("command", "says"), [
    ("run", ["live display", "report.html", "Exit 0 VALID", "loadgen run scenarios/"]),
    ("find-peak", ["peak.json", "--tolerance", "resumes", "loadgen find-peak scenarios/"]),
    ("sweep", ["NOISY", "sweep.csv", "loadgen sweep scenarios/"]),
    ("report", ["compare.json", "works offline"]),
    ("compare", ["95% confidence", "construct mismatch", "--out runs/a-vs-b"]),
])
def test_each_subcommand_says_what_it_does(command: str, says: list[str],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    text = _help(capsys, command)
    for phrase in says:
        assert phrase in text, (command, phrase)
