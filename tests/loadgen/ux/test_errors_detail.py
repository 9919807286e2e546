"""Errors that explain themselves: per kind, the count and the first few distinct messages,
kept by the collector, merged across load processes, written to result.json
(`errors_detail`) and said first in the summary when most queries failed."""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.api import run_test
from loadgen.judge.verdict import ReasonCode
from loadgen.plan.settings import load_settings
from loadgen.record.collect import DETAIL_CHARS, Collector
from loadgen.record.tally import MAX_DETAILS, RunTimes, Tally, merge_tallies
from loadgen.report.summary import render_summary

MS = 1_000_000
TIMES = RunTimes(0, 0, 10 * MS, 10 * MS, False, 0)


def _failing(c: Collector, first_id: int, details: list[str | None], kind: str = "http_503",
             ) -> None:
    for i, detail in enumerate(details, start=first_id):
        c.issued_query(i, i * MS, i * MS, 1, True)
        c.failed(i, i * MS + 10, kind, detail)


def test_the_first_few_distinct_messages_are_kept_per_kind() -> None:
    c = Collector(slo_ns=50 * MS)
    c.started(0, 0)
    messages = ["HTTP/1.1 503 a", "HTTP/1.1 503 a", None, "HTTP/1.1 503 b", "x" * 1000,
                "HTTP/1.1 503 d"]
    _failing(c, 0, messages)
    _failing(c, 100, ["refused"], kind="connect_error")
    tally = c.tally(TIMES)
    assert tally.errors_by_kind == {"http_503": 6, "connect_error": 1}
    assert tally.error_messages == {"http_503": ("HTTP/1.1 503 a", "HTTP/1.1 503 b",
                                                 "x" * DETAIL_CHARS),
                                    "connect_error": ("refused",)}
    assert len(tally.error_messages["http_503"]) == MAX_DETAILS


def test_messages_survive_encoding_and_merge_without_duplicates() -> None:
    parts = []
    for messages in (["a", "b"], ["b", "c", "d"]):
        c = Collector(slo_ns=50 * MS)
        c.started(0, 0)
        _failing(c, 0, list(messages))
        parts.append(Tally.decode(json.loads(json.dumps(c.tally(TIMES).encode()))))
    merged = merge_tallies(parts)
    assert merged.errors_by_kind == {"http_503": 5}
    assert merged.error_messages == {"http_503": ("a", "b", "c")}


def test_a_failing_run_says_why_in_result_json_the_verdict_and_the_summary(
        tmp_path: Path) -> None:
    settings = load_settings(None, ["preset='dev'", "target_qps=400", "target_latency_ms=50",
                                    "min_duration_s=0.3", "min_query_count=50"])
    result = run_test(settings, "sim:service=const:100us,error_rate=0.9,seed=3", tmp_path)
    doc = json.loads((tmp_path / "result.json").read_text())
    detail = doc["errors_detail"]["sim_error"]
    assert detail["count"] == doc["errors_by_kind"]["sim_error"] > doc["queries"]
    assert detail["messages"] == ["simulated failure (error_rate=0.9)"]
    assert ReasonCode.ERRORS in result.verdict.codes
    errors = next(r for r in result.verdict.reasons if r.code is ReasonCode.ERRORS)
    assert "; first sim_error: simulated failure (error_rate=0.9)" in errors.text
    text = render_summary(result)
    head = text.splitlines()[:8]
    assert any(line.startswith("  cause   : most queries failed") and
               "as sim_error: simulated failure" in line for line in head), head
    assert "Errors (count, first distinct messages):" in text


def test_a_run_with_few_errors_lists_them_but_names_no_cause() -> None:
    settings = load_settings(None, ["preset='dev'", "target_qps=400", "target_latency_ms=50",
                                    "min_duration_s=0.3", "min_query_count=50"])
    result = run_test(settings, "sim:service=const:100us,error_rate=0.05,seed=3")
    text = render_summary(result)
    assert "cause   :" not in text and "sim_error" in text
    assert result.stats.errors_detail["sim_error"].count == result.stats.errors > 0


def test_unfinished_and_timed_out_queries_say_what_happened() -> None:
    c = Collector(slo_ns=50 * MS, query_timeout_ns=5 * MS)
    c.started(0, 0)
    for i in range(3):
        c.issued_query(i, 0, 0, 1, True)
    c.expire(6 * MS)
    c.issued_query(9, 6 * MS, 6 * MS, 1, True)
    c.abandon(7 * MS)
    tally = c.tally(TIMES)
    drained = "still in flight when the drain timeout ran out"
    assert tally.error_messages == {"timeout": ("no answer within query_timeout_ms 5",),
                                    "unfinished": (drained,)}


def test_the_html_report_lists_the_errors(tmp_path: Path) -> None:
    from loadgen.report.html import build_report

    settings = load_settings(None, ["preset='dev'", "target_qps=400", "target_latency_ms=50",
                                    "min_duration_s=0.3", "min_query_count=50"])
    run_test(settings, "sim:service=const:100us,error_rate=0.3,seed=3", tmp_path)
    page = build_report(tmp_path).read_text()
    assert "<h2>Errors</h2>" in page and "simulated failure (error_rate=0.3)" in page
