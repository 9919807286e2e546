"""Error-adjusted tails: failed and unfinished queries counted as infinitely slow (or at the
timeout) move each percentile up by exactly their share; the option judges on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.api import run_test
from loadgen.judge.adjusted import error_adjusted, percentile_key
from loadgen.judge.stats import LatencySummary
from loadgen.plan.settings import settings_from_mapping
from loadgen.record.histograms import new_histogram, percentile_ns

MS = 1_000_000


def _hist(values_ms: range) -> object:
    h = new_histogram()
    for v in values_ms:
        h.record_value(v * MS)
    return h


def test_injected_failures_raise_the_p99_by_their_share() -> None:
    h = _hist(range(1, 1001))  # 1..1000 ms, finished
    finished_p99 = percentile_ns(h, 99)
    adjusted = error_adjusted(h, failed=5, percentiles=(50, 90, 99))
    # 1005 requests: the p99 is the 994.95th, i.e. the finished ones' 99.495th percentile
    assert adjusted["p99"] == percentile_ns(h, 99.495)
    # 995 vs 990 ms, to HDR's resolution (3 significant digits: about 1 ms here)
    assert adjusted["p99"] - finished_p99 == pytest.approx(5 * MS, abs=MS)
    assert adjusted["p50"] == percentile_ns(h, 50.25)  # the 502.5th of 1000
    assert error_adjusted(h, 0, (99,))["p99"] == finished_p99
    over = error_adjusted(h, failed=20, percentiles=(99,))  # the 1009.8th of 1000 finished
    assert over == {"p99": None}  # infinite
    assert error_adjusted(h, 20, (99,), cap_ns=30_000 * MS) == {"p99": 30_000 * MS}
    assert error_adjusted(new_histogram(), 3, (50,)) == {"p50": None}
    assert percentile_key(99.9) == "p999" and percentile_key(50) == "p50"


def test_the_summary_writes_and_reads_the_adjusted_keys() -> None:
    s = LatencySummary.of(_hist(range(1, 101)), failed=2, percentiles=(50, 90, 99))
    doc = s.as_dict()
    assert doc["p99_error_adjusted"] is None and doc["p50_error_adjusted"] == percentile_ns(
        _hist(range(1, 101)), 51)
    assert LatencySummary.from_dict(doc) == s
    assert "p99_error_adjusted" not in LatencySummary.of(_hist(range(1, 5))).as_dict()


SETTINGS = {"scenario": "Server", "preset": "dev", "target_qps": 400.0, "min_duration_s": 1.0,
            "min_query_count": 300, "target_latency_ms": 50.0, "max_issue_lag_ms": 50.0}


@pytest.mark.parametrize("judge", [False, True])
def test_a_run_with_injected_failures(tmp_path: Path, judge: bool) -> None:
    settings = settings_from_mapping(SETTINGS | {"judge_error_adjusted": judge})
    result = run_test(settings, "sim:service=const:1ms,error_rate=0.02,seed=3", out_dir=tmp_path)
    lat = json.loads((tmp_path / "result.json").read_text())["latency_ns"]
    assert result.stats.errors > 0
    assert lat["p50_error_adjusted"] >= lat["p50"]
    assert lat["p99_error_adjusted"] is None  # 2% failed: the p99 is a failure, infinite
    codes = [str(c) for c in result.verdict.codes]
    assert ("error_adjusted" in codes) is judge and "errors" in codes


def test_the_summary_shows_the_adjusted_tail_when_failures_move_it(tmp_path: Path) -> None:
    run_test(settings_from_mapping(SETTINGS), "sim:service=const:1ms,error_rate=0.02,seed=3",
             out_dir=tmp_path)
    text = (tmp_path / "summary.txt").read_text()
    assert "error-adjusted (failed and unfinished as infinite): p50=" in text
    assert "p99=inf" in text


def test_the_report_shows_the_adjusted_tail(tmp_path: Path) -> None:
    from loadgen.report.html import build_report

    run_test(settings_from_mapping(SETTINGS), "sim:service=const:1ms,error_rate=0.02,seed=3",
             out_dir=tmp_path)
    page = build_report(tmp_path).read_text()
    assert "p99 error-adjusted (ms)</th>" in page and "<td>inf</td>" in page
