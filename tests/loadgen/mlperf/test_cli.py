"""`loadgen run` speaking MLPerf: --user-conf/--mlperf-conf as a settings layer, --mlperf-logs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.api import run_test
from loadgen.cli.main import main as cli_main
from loadgen.mlperf.runlogs import accuracy_rows
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import settings_from_mapping
from tests.loadgen.mlperf import logfiles

pytestmark = pytest.mark.functional

ROOT = Path(__file__).resolve().parents[3]


def _loadgen(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """`loadgen ARGS` through the CLI's entry point, in this process: its exit code and what it
    wrote to stderr."""
    capsys.readouterr()
    code = cli_main(list(args))
    return code, capsys.readouterr().err


def test_conf_layers_and_mlperf_logs_beside_result_json(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]):
    rules, user = tmp_path / "mlperf.conf", tmp_path / "user.conf"
    rules.write_text("*.*.qsl_rng_seed = 11\n*.Server.target_latency_percentile = 99\n"
                     "*.Server.target_latency = 50\n")
    user.write_text("*.*.min_duration = 400\n*.*.min_query_count = 200\n"
                    "mymodel.Server.target_qps = 800\n*.Server.target_qps = 5\n"
                    "*.Server.coalesce_queries = 1\n")
    out = tmp_path / "run"
    code, err = _loadgen(capsys, "run", str(ROOT / "scenarios/server.toml"),
                         "--sut", "sim:service=const:200us", "--mlperf-conf", str(rules),
                         "--user-conf", str(user), "--model", "mymodel",
                         "--set", "max_issue_lag_ms=50", "--mlperf-logs", "--quiet",
                         "--out", str(out))
    assert code in (0, 1), err
    assert "not applied: server_coalesce_queries" in err
    result = json.loads((out / "result.json").read_text())
    settings = result["settings"]
    assert (settings["min_duration_s"], settings["min_query_count"], settings["target_qps"],
            settings["target_latency_ms"], settings["qsl_rng_seed"]) == (0.4, 200, 800.0, 50.0, 11)
    entries = logfiles.detail(out / "mlperf_log_detail.txt")
    assert entries["effective_target_qps"] == 800.0
    assert entries["effective_target_latency_ns"] == 50_000_000
    assert entries["result_query_count"] == result["queries"]
    assert entries["result_validity"] == ("VALID" if result["valid"] else "INVALID")
    summary = logfiles.summary(out / "mlperf_log_summary.txt")
    assert summary["Scenario"] == "Server" and summary["min_query_count"] == "200"
    assert json.loads((out / "mlperf_log_accuracy.json").read_text()) == []


def test_an_accuracy_run_is_judged_on_accuracy_however_short():
    settings = settings_from_mapping({"scenario": "SingleStream", "mode": "accuracy",
                                      "accuracy_target": 0.9, "total_sample_count": 256,
                                      "performance_sample_count": 256})
    result = run_test(settings, "builtin:digits")
    assert result.stats.duration_s < settings.min_duration_s
    assert result.valid, result.verdict.reasons
    assert result.stats.accuracy is not None and result.stats.accuracy.value >= 0.9


def test_an_accuracy_run_logs_every_sample_with_its_output(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]):
    out = tmp_path / "run"
    code, err = _loadgen(capsys, "run", str(ROOT / "scenarios/single_stream.toml"),
                         "--sut", "builtin:digits",
                    "--set", "mode='accuracy'", "--set", "total_sample_count=64",
                    "--set", "performance_sample_count=64", "--mlperf-logs", "--quiet",
                    "--out", str(out))
    assert code in (0, 1), err
    entries = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert sorted(e["qsl_idx"] for e in entries) == list(range(64))
    assert sorted(e["seq_id"] for e in entries) == list(range(64))  # one sample a query
    labels = [int.from_bytes(bytes.fromhex(e["data"]), "little") for e in entries]
    assert all(0 <= label <= 9 for label in labels) and len(set(labels)) > 1
    detail = logfiles.detail(out / "mlperf_log_detail.txt")
    assert detail["effective_test_mode"] == "AccuracyOnly"


def test_accuracy_rows_split_an_array_output_by_sample_and_keep_other_outputs_whole():
    plan = RunPlan.of(settings_from_mapping({
        "scenario": "MultiStream", "mode": "accuracy", "samples_per_query": 2,
        "total_sample_count": 5, "performance_sample_count": 5}))
    outputs = {1: np.array([7, 8], dtype=np.int64), 0: "hi", 2: None}
    rows = accuracy_rows(plan, outputs)
    assert [(r.seq_id, r.qsl_idx) for r in rows] == [(1, 2), (1, 3), (0, 0), (0, 1), (2, 4)]
    assert [r.data for r in rows] == [np.int64(7).tobytes(), np.int64(8).tobytes(), b"hi",
                                      b"hi", b""]
