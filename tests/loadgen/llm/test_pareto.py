"""The Pareto chart of a token sweep: one point per sweep point, tokens/s per user against
tokens/s in all, VALID and INVALID marked, the frontier, and pareto.csv beside report.html."""

from __future__ import annotations

import csv
from pathlib import Path

from loadgen.campaigns.sweep import parse_axis, run_sweep
from loadgen.plan.settings import settings_from_mapping
from loadgen.report.html import build_report
from loadgen.report.pareto import pareto_chart
from tests.loadgen.llm.tokenrun import llmsim_spec, token_server

SETTINGS = token_server(min_duration_s=0.5, target_qps=20.0, min_query_count=8,
                        ttft_latency_ms=200.0, tpot_latency_ms=6.0, input_tokens=40)
SPEC = llmsim_spec("1ms")


def test_a_token_sweep_gets_a_pareto_chart_and_csv(tmp_path: Path) -> None:
    axes = [parse_axis("target_qps=10,80")]
    run_sweep(settings_from_mapping(SETTINGS), SPEC, axes, 1, tmp_path)
    report = build_report(tmp_path)
    with (tmp_path / "pareto.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["point"] for r in rows] == ["target_qps=10", "target_qps=80"]
    light, heavy = ({k: float(r[k]) for k in ("tokens_per_s_per_user", "tokens_per_s")}
                    for r in rows)
    # more load: more tokens in all, fewer per user (the batch grows, each step is longer)
    assert heavy["tokens_per_s"] > light["tokens_per_s"]
    assert heavy["tokens_per_s_per_user"] < light["tokens_per_s_per_user"]
    assert all(r["gpus"] == "" for r in rows)  # no endpoint said how many GPUs
    assert "Throughput vs interactivity (Pareto)" in report.read_text()


def test_the_chart_marks_valid_invalid_and_the_frontier() -> None:
    def row(point: str, user: float, total: float, valid: bool,
            frontier: bool) -> dict[str, object]:
        return {"point": point, "tokens_per_s_per_user": user, "tokens_per_s": total,
                "gpus": 2, "tokens_per_s_per_gpu": total / 2, "valid": valid,
                "frontier": frontier}

    chart = pareto_chart([row("a", 50, 100, True, True), row("b", 20, 400, True, True),
                          row("c", 10, 900, False, False)])
    names = [d["name"] for d in chart.data]
    assert names == ["VALID", "INVALID", "frontier"]
    assert chart.data[0]["y"] == [50, 200]  # per GPU: every point knows its GPUs
    assert chart.layout["yaxis"]["title"]["text"] == "output tokens/s per GPU"
