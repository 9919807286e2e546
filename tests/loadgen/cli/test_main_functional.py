"""The `loadgen` command as a user runs it: exit codes, files, Ctrl-C."""

import json
import signal
import subprocess
import sys

import pytest

from tests.runs import interrupted_run

pytestmark = pytest.mark.functional

LOADGEN = [sys.executable, "-m", "loadgen"]
DEV = ["--set", "preset='dev'", "--set", "min_duration_s=0.5", "--set", "min_query_count=500",
       "--set", "target_qps=1000", "--set", "max_issue_lag_ms=50"]


def _run(*args, timeout=60):
    return subprocess.run([*LOADGEN, *args], capture_output=True, text=True, timeout=timeout,
                          check=False)


def test_valid_run_exits_zero_and_writes_the_run_directory(tmp_path):
    out = tmp_path / "run"
    p = _run("run", "scenarios/server.toml", "--sut", "sim:service=const:200us", "--out", str(out),
             *DEV)
    result = json.loads((out / "result.json").read_text())
    assert p.returncode == 0, result["reasons"]
    for key in ("schema_version", "scenario", "valid", "reasons", "warnings", "settings", "seeds",
                "environment", "queries", "samples", "errors", "duration_s", "qps_scheduled",
                "qps_completed", "goodput_qps", "latency_ns", "service_latency_ns",
                "issue_lag_ns", "query_latency_ns", "early_stopping", "reason_codes", "plan",
                "target_latency_at_ns"):
        assert key in result, key
    assert set(result["latency_ns"]) >= {"p50", "p90", "p95", "p99", "p999", "mean", "min", "max"}
    assert "Result is : VALID" in (out / "summary.txt").read_text()
    assert (out / "queries.csv").exists()
    page = (out / "report.html").read_text()  # every run gets its report
    assert 'class="chart"' in page and f"{out / 'report.html'}" in p.stdout


def test_invalid_run_exits_one(tmp_path):
    p = _run("run", "scenarios/server.toml", "--sut", "sim:service=const:200us,error_rate=0.5",
             "--out", str(tmp_path), *DEV)
    assert p.returncode == 1
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["errors_by_kind"]["sim_error"] == result["errors"] > 0
    assert "errors" in result["reason_codes"]


@pytest.mark.parametrize("args", [
    ["--set", "target_qps=-1"],
    ["--set", "nonsense=1"],
    ["--sut", "sim:service=fast"],
    ["--sut", "carrier-pigeon"],
])
def test_bad_settings_or_spec_exit_two_and_name_the_problem(tmp_path, args):
    sut = [] if "--sut" in args else ["--sut", "null"]
    p = _run("run", "scenarios/server.toml", *sut, "--out", str(tmp_path), *args)
    assert p.returncode == 2
    assert "loadgen:" in p.stderr and "Traceback" not in p.stderr


def test_ctrl_c_writes_a_partial_result_marked_interrupted(tmp_path):
    result, out = interrupted_run(tmp_path, "sim:service=const:200us", signal.SIGINT)
    assert result["interrupted"] is True and not result["valid"]
    assert any("interrupted" in r for r in result["reasons"])
    assert result["reason_codes"][0] == "interrupted"
    assert result["queries"] > 0
    assert (tmp_path / "queries.csv").read_text().count("\n") > result["queries"]
    assert "INVALID" in out


def test_sim_stall_ends_invalid_with_unfinished_queries(tmp_path):
    p = _run("run", "scenarios/server.toml", "--sut", "sim:service=const:200us,stall_after_s=0.3",
             "--out", str(tmp_path), *DEV, "--set", "drain_timeout_s=0.5", "--set",
             "min_duration_s=1")
    assert p.returncode == 1
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["unfinished"] > 0 and result["errors_by_kind"]["unfinished"] > 0
