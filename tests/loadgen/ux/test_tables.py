"""The answer at a glance: one row per run (summary.csv), per sweep point (sweep.csv and the
printed table), per find-peak probe; token columns for token runs; valid and reasons always;
durations formatted by the one formatter."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from loadgen.api import run_test
from loadgen.cli.main import main
from loadgen.plan.settings import load_settings
from loadgen.plan.units import format_duration
from loadgen.report.overview import peak_table, sweep_table
from loadgen.report.peakdoc import PeakDocument
from loadgen.report.rows import SUMMARY_CSV, point_row, render_table, run_row
from loadgen.report.sweepdoc import SweepDocument

DATA = Path(__file__).parents[2] / "data" / "records"

DEV = ["preset='dev'", "min_duration_s=0.5", "min_query_count=60", "energy='off'",
       "max_issue_lag_ms=1000", "target_latency_ms=100", "target_qps=100"]
TOKENS = [*DEV, "input_tokens=8", "output_tokens=4", "target_qps=40",
          "target_latency_ms=5000"]
TOKEN_COLUMNS = ("ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "tpot_p99_ms",
                 "output_tokens_per_s")


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(("ns", "text"), [
    (0, "0 ns"), (999, "999 ns"), (845_000, "845 us"), (2_707_460, "2.71 ms"),
    (1.41e9, "1.41 s"), (999.96e6, "1 s"), (8.9e9, "8.9 s"), (61e6, "61 ms"),
    (-3.2e6, "-3.2 ms"), (12_345e9, "12300 s")])
def test_one_duration_formatter(ns: float, text: str) -> None:
    assert format_duration(ns) == text


def test_a_run_writes_summary_csv_and_queries_csv_with_latency(tmp_path: Path) -> None:
    result = run_test(load_settings(None, DEV), "sim:service=const:1ms", out_dir=tmp_path)
    (row,) = _csv(tmp_path / SUMMARY_CSV)
    assert row["valid"] == str(result.valid) and "reasons" in row
    assert float(row["p99_ms"]) == pytest.approx(result.stats.query_latency_ns.p99 / 1e6)
    assert not set(TOKEN_COLUMNS) & set(row)
    queries = _csv(tmp_path / "queries.csv")
    assert all(int(q["latency_ns"]) == int(q["done_ns"]) - int(q["scheduled_ns"])
               for q in queries)
    assert min(int(q["latency_ns"]) for q in queries) >= 1_000_000  # the 1 ms service


def test_a_token_run_has_token_columns(tmp_path: Path) -> None:
    result = run_test(load_settings(None, TOKENS), "llmsim:", out_dir=tmp_path)
    (row,) = _csv(tmp_path / SUMMARY_CSV)
    for column in TOKEN_COLUMNS:
        assert float(row[column]) > 0, column
    ts = result.stats.token_stats
    assert ts is not None
    assert float(row["ttft_p99_ms"]) == pytest.approx(ts.latency("ttft_ns").summary.p99 / 1e6)
    queries = [q for q in _csv(tmp_path / "queries.csv") if q["status"] == "ok"]
    assert queries and all(0 < int(q["ttft_ns"]) <= int(q["latency_ns"]) for q in queries)
    assert all(int(q["output_tokens"]) == 4 for q in queries)


def test_sweep_csv_and_table_carry_every_point(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    args = [a for s in TOKENS for a in ("--set", s)]
    assert main(["sweep", "--sut", "llmsim:", "--out", str(tmp_path), "--grid",
                 "sut.max_seqs=2,8", "--launches", "1", "--quiet", *args]) == 0
    rows = _csv(tmp_path / "sweep.csv")
    assert [r["sut.max_seqs"] for r in rows] == ["2", "8"]
    for r in rows:
        assert {"valid", "reasons", *TOKEN_COLUMNS} <= set(r)
        assert float(r["output_tokens_per_s"]) > 0
    out = capsys.readouterr().out
    table = out.split("conditions:")[0].splitlines()
    assert table[0].split()[:3] == ["sut.max_seqs", "offered/s", "achieved/s"]
    assert "TTFT p99" in table[0] and "verdict" in table[0]
    assert len(table) == 3 and table[1].startswith("2 ") and table[2].startswith("8 ")
    assert all(line.split()[-1] in ("VALID", "early_stopping", "issue_lag") or "INVALID" in line
               for line in table[1:])
    assert " ms" in table[1] and "e+" not in out
    page = (tmp_path / "report.html").read_text()  # the same table leads the report
    assert page.index('<pre class="glance">' + table[0]) < page.index('class="chart"')


def test_point_row_is_valid_only_when_every_launch_is() -> None:
    rows = [{"p99_ms": 2.0, "valid": True, "reasons": ""},
            {"p99_ms": 4.0, "valid": False, "reasons": "issue_lag"},
            {"p99_ms": 3.0, "valid": False, "reasons": "early_stopping issue_lag"}]
    assert point_row(rows) == {"p99_ms": 3.0, "valid": False, "reasons": "early_stopping issue_lag"}


def test_the_table_says_why_a_row_is_invalid() -> None:
    text = render_table([{"x": 1, "p99_ms": 2.5, "valid": False, "reasons": "issue_lag"},
                         {"x": 2, "p99_ms": 1500.0, "valid": True, "reasons": ""}], ["x"])
    lines = text.splitlines()
    assert lines[1].endswith("INVALID issue_lag") and "2.5 ms" in lines[1]
    assert lines[2].endswith("VALID") and "1.5 s" in lines[2]


def test_peak_table_marks_harness_limited_probes() -> None:
    written = json.loads((DATA / "peak_peak.json").read_text())
    probe = written["probes"][0] | {
        "target_qps": 400.0, "trial": 0, "valid": False, "harness_limited": True,
        "row": {"offered_qps": 401.0, "valid": False, "reasons": "issue_lag"}}
    doc = PeakDocument.from_dict(written | {"probes": [probe]})
    assert "INVALID issue_lag (harness-limited)" in peak_table(doc)
    written = json.loads((DATA / "sweep.json").read_text())
    point = written["points"][0] | {"values": {"target_qps": 1},
                                    "row": {"offered_qps": 1.0, "valid": True}}
    sweep = SweepDocument.from_dict(written | {"grid": {"target_qps": [1]}, "points": [point]})
    assert sweep_table(sweep).splitlines()[1].split() == ["1", "1", "VALID"]


def test_run_row_reads_a_saved_result(tmp_path: Path) -> None:
    result = run_test(load_settings(None, DEV), "null", out_dir=tmp_path)
    row = run_row(result)
    assert row["offered_qps"] == pytest.approx(result.stats.qps_scheduled, rel=1e-3)
    assert row["valid"] == result.valid
