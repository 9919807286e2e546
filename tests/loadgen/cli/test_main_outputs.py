"""`loadgen run` loses no run: result.json first, each derived file's failure reported and
the rest written; a bad --pushgateway refused before the run; one run per --out directory;
every crash exits 3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.cli.exits import EXIT_ERROR, EXIT_INVALID, EXIT_USAGE, EXIT_VALID
from loadgen.cli.main import main
from loadgen.record.querylog import QueryLog

ROOT = Path(__file__).resolve().parents[3]
RAN = (EXIT_VALID, EXIT_INVALID)  # a loaded test host may miss the dev run's lag bound
SHORT = ["--sut", "sim:service=const:100us", "--quiet", "--set", "preset='dev'",
         "--set", "min_duration_s=0.2", "--set", "min_query_count=50", "--set", "target_qps=400"]


def _run(out: Path, *extra: str) -> int:
    return main(["run", "scenarios/server.toml", "--out", str(out), *SHORT, *extra])


def test_a_crash_exits_three_not_invalids_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("loadgen.api.run_test", crash)
    assert _run(tmp_path / "run") == EXIT_ERROR
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err and "crashed" in err


def test_a_malformed_pushgateway_is_refused_before_the_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert _run(out, "--pushgateway", "http://127.0.0.1:abc") == EXIT_USAGE
    assert "--pushgateway" in capsys.readouterr().err
    assert not (out / "result.json").exists()  # refused before anything ran


def test_a_failing_report_or_summary_loses_nothing_else(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise OSError("disk says no")

    monkeypatch.setattr("loadgen.report.html.build_report", broken)
    monkeypatch.setattr("loadgen.api.write_summary", broken)
    out = tmp_path / "run"
    assert _run(out) in RAN
    err = capsys.readouterr().err
    assert "report.html failed" in err and "summary.txt failed" in err
    result = json.loads((out / "result.json").read_text())
    assert result["schedule"]["queries"] > 0 and result["queries"] > 0
    assert (out / "schedule.bin").exists() and (out / "queries.csv").exists()
    assert not (out / "report.html").exists()


def test_out_onto_another_run_is_refused_unless_force(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert _run(out) in RAN
    first = (out / "result.json").read_text()
    (out / "mlperf_log_summary.txt").write_text("Result is : INVALID\n")  # an older run's
    (out / "notes.md").write_text("mine\n")  # not a run's file
    assert _run(out) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "holds another run" in err and "--force" in err
    assert (out / "result.json").read_text() == first  # untouched
    assert _run(out, "--force", "--set", "target_qps=300") in RAN
    assert not (out / "mlperf_log_summary.txt").exists()
    assert (out / "notes.md").read_text() == "mine\n"
    assert json.loads((out / "result.json").read_text())["settings"]["target_qps"] == 300


def test_a_failing_query_log_csv_loses_not_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    def broken(self: QueryLog) -> None:  # queries.bin written, then the CSV fails
        self.flush()
        self._file.close()
        raise OSError("disk full")

    monkeypatch.setattr(QueryLog, "close", broken)
    out = tmp_path / "run"
    assert _run(out) in RAN
    assert "query log's CSV failed" in capsys.readouterr().err
    assert (out / "result.json").exists() and (out / "queries.bin").stat().st_size > 0


def test_a_replay_never_replaces_the_run_it_replays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)  # the default --out, runs/latest, lands here
    main(["run", str(ROOT / "scenarios/server.toml"), *SHORT])
    latest = tmp_path / "runs/latest"
    schedule = (latest / "schedule.bin").read_bytes()
    for extra in ([], ["--out", str(latest), "--force"]):
        assert main(["run", "--replay", str(latest), "--sut", "null", "--quiet",
                     *extra]) == EXIT_USAGE
        assert "replays" in capsys.readouterr().err
    assert (latest / "schedule.bin").read_bytes() == schedule
