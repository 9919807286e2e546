"""The README's table of peers' names says what their code computes (checked against
GuideLLM's `schemas/request_stats.py`, AIPerf's `metrics/types/`, vLLM's `bench serve`)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _rows() -> dict[str, list[str]]:
    """The name table's rows by our name's first cell (ours, vLLM, AIPerf, GuideLLM, MLPerf)."""
    text = (ROOT / "README.md").read_text()
    table = text.split("| ours | vLLM `bench serve` | AIPerf | GuideLLM | MLPerf LoadGen |")[1]
    rows = {}
    for line in table.split("\n\n")[0].splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0].split()[0].strip("`")] = cells
    return rows


def test_guidellms_time_per_output_token_is_our_normalized_latency_from_send() -> None:
    row = _rows()["normalized_latency_ns"]
    assert "time_per_output_token_ms" in row[3] and "send) / N" in row[3]
    assert "first token) / N" not in row[3]


def test_each_tpot_is_the_gap_after_the_first_token_over_n_minus_one() -> None:
    row = _rows()["tpot_ns"]
    assert "`inter_token_latency_ms` ((last - first token) / (N - 1))" in row[3]
    assert "(OSL - 1)" in row[2] and "(N - 1)" in row[1]


def test_end_to_end_latencies_say_where_they_end() -> None:
    row = _rows()["e2e_ns"]
    assert "usage chunk" in row[1] and "final response" in row[2] and "from send" in row[3]
