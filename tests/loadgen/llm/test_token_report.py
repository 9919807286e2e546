"""summary.txt and report.html of a token run show its token figures; a plain run shows none."""

from pathlib import Path

from loadgen.report.html import build_report
from loadgen.report.result import read_result, write_result
from loadgen.report.summary import render_summary, write_summary
from tests.loadgen.llm.test_token_compare import _result


def test_summary_and_report_of_a_token_run(tmp_path: Path) -> None:
    result = _result(2_000_000)
    write_result(tmp_path, result)
    write_summary(tmp_path, result)
    text = (tmp_path / "summary.txt").read_text()
    assert text == render_summary(read_result(tmp_path))  # re-rendered from result.json
    for needle in ("Token latencies", "  TTFT ", "  TPOT ", "  ITL ", "output tokens/s",
                   "Token mode: p99 TTFT", "early stop passes", "Token SLOs: 100.00%"):
        assert needle in text, needle
    assert "Early stop: fails" not in text  # query latency is not judged in token mode
    page = build_report(tmp_path).read_text()
    assert "<h2>Tokens</h2>" in page and "<td>TPOT</td>" in page
