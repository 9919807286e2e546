"""openai:// checks the endpoint with one request before the run: a wrong model name fails
at once (exit 3) naming the served models, and a right one runs (models_server, its own
process on loopback, stopped by pid)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.cli.main import main
from tests.served import port_server

TOKENS = ["--set", "input_tokens=4", "--set", "output_tokens=2", "--set", "preset='dev'",
          "--set", "min_duration_s=0.5", "--set", "min_query_count=10", "--set", "target_qps=20",
          "--set", "target_latency_ms=5000", "--set", "energy='off'", "--quiet"]


def _posts(log: Path) -> list[str]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_a_wrong_model_fails_before_the_run_naming_the_served_ones(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "posts.jsonl"
    with port_server("tests.loadgen.llm_wire.models_server", "--log", str(log)) as port:
        code = main(["run", "--sut", f"openai://127.0.0.1:{port}/tinny", "--out",
                     str(tmp_path / "run"), *TOKENS])
    err = capsys.readouterr().err
    assert code == 3
    assert "'tinny' is not served" in err and "'tiny'" in err and "did you mean tiny?" in err
    assert _posts(log) == []  # not one request of the run was sent


def test_without_a_model_list_the_preflight_request_says_why(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "posts.jsonl"
    with port_server("tests.loadgen.llm_wire.models_server", "--log", str(log),
                     "--no-models") as port:
        code = main(["run", "--sut", f"openai://127.0.0.1:{port}/other", "--out",
                     str(tmp_path / "run"), *TOKENS])
    err = capsys.readouterr().err
    assert code == 3
    assert "preflight POST /v1/chat/completions answered 404" in err and "does not exist" in err
    assert _posts(log) == ["other"]  # the preflight alone


def test_the_right_model_passes_the_preflight_and_runs(tmp_path: Path) -> None:
    log = tmp_path / "posts.jsonl"
    with port_server("tests.loadgen.llm_wire.models_server", "--log", str(log)) as port:
        code = main(["run", "--sut", f"openai://127.0.0.1:{port}/tiny", "--out",
                     str(tmp_path / "run"), *TOKENS])
    assert code in (0, 1)
    doc = json.loads((tmp_path / "run" / "result.json").read_text())
    assert doc["queries"] >= 10 and doc["errors"] == 0
    assert len(_posts(log)) > doc["queries"]  # the preflight, warm-up and measured requests
