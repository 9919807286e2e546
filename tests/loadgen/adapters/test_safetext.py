"""Text from outside is made safe where it enters: a server's error message holding a lone
surrogate reaches result.json, summary and report without crashing them, and a result.json
holding one is rendered by `loadgen report`."""

from __future__ import annotations

import json
from pathlib import Path

from loadgen.adapters.safetext import safe_text, safe_tree
from loadgen.cli.main import main
from loadgen.record.collect import Collector
from loadgen.report.result import read_result
from loadgen.report.summary import render_summary

LONE = "bad \ud800 answer"


def test_safe_text_keeps_a_lone_surrogate_visible_as_its_escape() -> None:
    assert safe_text(LONE) == "bad \\ud800 answer"
    same = "déjà vu \U0001f600"
    assert safe_text(same) is same
    assert safe_tree({LONE: [LONE, 1, None]}) == {safe_text(LONE): [safe_text(LONE), 1, None]}


def test_a_servers_error_message_enters_the_record_safe() -> None:
    collector = Collector(10**9)
    collector.issued_query(1, 0, 0, 1, True)
    collector.failed(1, 5, "http_500", f"HTTP 500: {LONE}")
    (message,) = collector.error_messages["http_500"]
    message.encode()  # would raise UnicodeEncodeError on the raw text
    assert "\\ud800" in message


def test_report_and_summary_of_a_result_holding_a_lone_surrogate(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["run", "scenarios/server.toml", "--sut", "null", "--out", str(out), "--quiet",
                 "--set", "preset='dev'", "--set", "min_duration_s=0.1",
                 "--set", "target_qps=200"]) in (0, 1)
    doc = json.loads((out / "result.json").read_text())
    doc["errors_detail"] = {"http_500": {"count": 1, "messages": [LONE]}}
    doc["errors_by_kind"] = {"http_500": 1}
    (out / "result.json").write_text(json.dumps(doc))  # ASCII: the surrogate as "\ud800"
    (out / "report.html").unlink()
    assert "\\ud800" in render_summary(read_result(out)).encode().decode()
    assert main(["report", str(out)]) == 0
    assert "ud800" in (out / "report.html").read_text()
