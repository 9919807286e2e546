"""Errors that teach: a mistyped key or spec names the closest known one; help lists every
SUT spec kind."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.adapters.registry import SPEC_FORMS, make_sut
from loadgen.cli.main import build_parser, main
from loadgen.errors import SettingsError, SutSpecError, suggest
from loadgen.plan.settings import settings_from_mapping


def test_suggest_names_the_closest_choice_or_nothing() -> None:
    assert suggest("target_qsp", ["target_qps", "concurrency"]) == "; did you mean target_qps?"
    assert suggest("zzzz", ["target_qps", "concurrency"]) == ""


def test_an_unknown_setting_suggests_the_known_one() -> None:
    with pytest.raises(SettingsError) as info:
        settings_from_mapping({"target_qsp": 5, "min_duraton_s": 1})
    assert "target_qsp: unknown key; did you mean target_qps?" in info.value.problems
    assert "min_duraton_s: unknown key; did you mean min_duration_s?" in info.value.problems


@pytest.mark.parametrize(("spec", "hint"), [
    ("nul", "did you mean null?"),
    ("buildin:mlp", "did you mean builtin?"),
    ("sim:server=2", "did you mean servers?"),
])
def test_a_mistyped_sut_spec_suggests_the_known_one(spec: str, hint: str) -> None:
    with pytest.raises(SutSpecError, match=hint):
        make_sut(spec)


def test_a_mistyped_builtin_option_suggests_the_known_one() -> None:
    from sut.errors import ConfigError
    from sut.options import parse_options

    with pytest.raises(ConfigError, match="did you mean max_batch_size"):
        parse_options({"max_batchsize": "8"})


def test_help_lists_every_sut_spec_kind(capsys: pytest.CaptureFixture[str]) -> None:
    text = build_parser().format_help()
    for kind in ("null", "sim:", "builtin:", "http[s]://", "grpc[s]://"):
        assert kind in SPEC_FORMS and kind in text
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "grpc[s]://HOST:PORT/MODEL" in capsys.readouterr().out


def test_the_cli_exits_2_with_the_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    server = Path(__file__).resolve().parents[3] / "scenarios" / "server.toml"
    assert main(["run", str(server), "--sut", "null", "--set", "target_qsp=5"]) == 2
    assert "did you mean target_qps?" in capsys.readouterr().err
