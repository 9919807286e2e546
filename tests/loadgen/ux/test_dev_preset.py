"""The dev preset sizes a token run to what its verdict needs, and the summary names its two
goodput figures apart (queries within the latency SLO; requests meeting every token SLO)."""

from __future__ import annotations

import pytest

from loadgen.api import run_test
from loadgen.judge import early_stopping
from loadgen.plan.settings import DEV_PRESET, dev_token_queries, load_settings
from loadgen.report.summary import render_summary


@pytest.mark.parametrize("percentile", [90.0, 99.0, 99.9])
def test_dev_token_queries_match_early_stopping(percentile: float) -> None:
    needed = early_stopping.min_queries(percentile, 0)
    assert dev_token_queries(percentile) == max(needed, DEV_PRESET["min_query_count"])
    assert early_stopping.passes(dev_token_queries(percentile), 0, percentile)


def test_a_dev_token_run_asks_for_459_requests_and_a_plain_one_keeps_100() -> None:
    token = load_settings(None, ["preset='dev'", "input_tokens=8", "target_latency_ms=100"])
    assert token.min_query_count == 459 == early_stopping.min_queries(99.0, 0)
    plain = load_settings(None, ["preset='dev'", "target_latency_ms=100"])
    assert plain.min_query_count == DEV_PRESET["min_query_count"]
    asked = load_settings(None, ["preset='dev'", "input_tokens=8", "target_latency_ms=100",
                                 "min_query_count=50"])
    assert asked.min_query_count == 50  # what the user sets wins


def test_a_dev_token_run_can_be_valid_and_names_both_goodputs() -> None:
    settings = load_settings(None, [
        "preset='dev'", "input_tokens=8", "output_tokens=4", "target_qps=200",
        "target_latency_ms=10000", "min_duration_s=0.5", "max_issue_lag_ms=1000",
        "goodput_ttft_ms=10000", "energy='off'"])
    result = run_test(settings, "llmsim:")
    assert result.stats.early_stopping.passes, result.verdict.reasons
    text = render_summary(result)
    assert "latency-SLO goodput" in text and "token-SLO goodput" in text
    assert "Goodput   :" not in text
