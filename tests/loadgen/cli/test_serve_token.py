"""`loadgen serve` takes its bearer token from a flag, an environment variable or a file."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from loadgen.cli.exits import EXIT_USAGE
from loadgen.cli.main import main as cli_main
from loadgen.cli.serve import _auth_token


def _args(**given: object) -> argparse.Namespace:
    return argparse.Namespace(**{"auth_token": None, "auth_token_env": None,
                                 "auth_token_file": None, **given})


def test_the_token_comes_from_a_flag_a_variable_or_a_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _auth_token(_args()) is None
    assert _auth_token(_args(auth_token="a")) == "a"
    monkeypatch.setenv("SERVE_TOKEN", "from-env")
    assert _auth_token(_args(auth_token_env="SERVE_TOKEN")) == "from-env"
    path = tmp_path / "token"
    path.write_text("from-file\n")
    assert _auth_token(_args(auth_token_file=path)) == "from-file"


def test_a_missing_token_source_is_a_usage_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("SERVE_TOKEN_UNSET", raising=False)
    assert cli_main(["serve", "--model", "mlp", "--auth-token-env",
                     "SERVE_TOKEN_UNSET"]) == EXIT_USAGE
    assert "SERVE_TOKEN_UNSET" in capsys.readouterr().err
    assert cli_main(["serve", "--model", "mlp", "--auth-token-file",
                     str(tmp_path / "absent")]) == EXIT_USAGE
    empty = tmp_path / "empty"
    empty.write_text("\n")
    assert cli_main(["serve", "--model", "mlp", "--auth-token-file", str(empty)]) == EXIT_USAGE
    with pytest.raises(SystemExit):
        cli_main(["serve", "--model", "mlp", "--auth-token", "a", "--auth-token-env", "B"])
