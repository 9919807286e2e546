"""compare: intervals from launches (Welch) and from single runs (HDR order statistics,
Poisson counts); construct mismatches flagged with exit code 4, and not otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.cli.main import main
from loadgen.campaigns.compare import Side, compare, construct_differences, load_side, render, t_quantile
from loadgen.plan.settings import load_settings
from loadgen.campaigns.sweep import launch

TINY = ["preset='dev'", "min_duration_s=0.3", "warmup_s=0", "min_query_count=200",
        "target_latency_ms=20", "target_qps=500"]
SIM = "sim:service=const:200us,servers=1"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """a and b: the same test; qps: a higher rate; both: higher rate and two servers."""
    root = tmp_path_factory.mktemp("compare")
    base = load_settings("scenarios/server.toml", TINY)
    faster = load_settings("scenarios/server.toml", [*TINY, "target_qps=900"])
    plan = {"a": (base, SIM), "b": (base, SIM), "qps": (faster, SIM),
            "both": (faster, "sim:service=const:200us,servers=2")}
    for name, (settings, spec) in plan.items():
        launch(settings, spec, root / name)
    return {name: root / name for name in plan}


def test_t_quantile_matches_tables() -> None:
    for df, expected in ((1, 12.706), (2, 4.303), (5, 2.571), (10, 2.228), (30, 2.042),
                         (1e6, 1.960)):
        assert t_quantile(0.975, df) == pytest.approx(expected, abs=2e-3)


def _fake(qps: float, p99: float, seed: int = 1) -> dict[str, Any]:
    lat = {"p50": p99 / 2, "p90": p99 / 1.5, "p99": p99}
    return {"qps_scheduled": qps, "qps_completed": qps, "goodput_qps": qps,
            "samples_per_s": qps, "query_latency_ns": lat, "headline": {"value": qps},
            "duration_s": 10.0, "valid": True, "settings": {"target_qps": 100},
            "sut": {"sut": "x"}, "seeds": {"schedule": seed}, "environment": {}}


def test_welch_over_launches() -> None:
    a = Side("a", tuple(_fake(q, 1e6, i) for i, q in enumerate((100, 101, 99))))
    far = Side("b", tuple(_fake(q, 1e6, i) for i, q in enumerate((110, 111, 109))))
    near = Side("b", tuple(_fake(q, 1e6, i) for i, q in enumerate((100.5, 99.5, 100.2))))
    up = {m.metric: m for m in compare(a, far).metrics}["qps_completed"]
    assert up.method == "welch" and not up.noise and up.low > 0 and up.diff == pytest.approx(10)
    same = {m.metric: m for m in compare(a, near).metrics}["qps_completed"]
    assert same.noise and same.low < 0 < same.high
    assert not compare(a, far).mismatch  # seeds match launch by launch


def test_single_runs_use_histograms(runs: dict[str, Path]) -> None:
    result = compare(load_side(runs["a"]), load_side(runs["b"]))
    methods = {m.metric: m.method for m in result.metrics}
    assert methods["latency_p99_ns"] == "order-statistic" and methods["qps_completed"] == "poisson"
    for m in result.metrics:
        assert m.low <= m.diff <= m.high and m.low < m.high
    assert not result.mismatch and result.differences == ()  # the same test twice
    itself = compare(load_side(runs["a"]), load_side(runs["a"] / "result.json"))
    assert all(m.noise and m.diff == 0 for m in itself.metrics), render(itself)


def test_one_variable_is_not_a_mismatch(runs: dict[str, Path],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    diffs = construct_differences(load_side(runs["a"]), load_side(runs["qps"]))
    assert [d[0] for d in diffs] == ["settings.target_qps"]
    assert main(["compare", str(runs["a"]), str(runs["qps"])]) == 0
    out = capsys.readouterr().out
    assert "differs: settings.target_qps: 500.0 -> 900.0" in out and "mismatch" not in out
    qps = {m.metric: m for m in compare(load_side(runs["a"]), load_side(runs["qps"])).metrics}
    assert not qps["qps_completed"].noise and qps["qps_completed"].diff > 0


def test_construct_mismatch_exits_4(runs: dict[str, Path],
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(runs["a"]), str(runs["both"] / "result.json")]) == 4
    out = capsys.readouterr().out
    assert "construct mismatch" in out and "sut.servers" in out
    # naming both variables accepts the comparison; naming one does not
    assert main(["compare", str(runs["a"]), str(runs["both"]), "--vary", "settings.target_qps",
                 "--vary", "sut"]) == 0
    assert main(["compare", str(runs["a"]), str(runs["both"]),
                 "--vary", "settings.target_qps"]) == 4
    capsys.readouterr()
    assert main(["compare", str(runs["a"]), str(runs["both"]), "--json"]) == 4
    doc = json.loads(capsys.readouterr().out)
    assert doc["mismatch"] and {d[0] for d in doc["differences"]} == {"settings.target_qps",
                                                                     "sut.servers"}


def test_sweep_points_compare_by_launch(tmp_path: Path) -> None:
    for point, qps in (("p0", 300), ("p1", 600)):
        for k in range(2):
            s = load_settings(None, [*TINY, f"target_qps={qps}", f"schedule_rng_seed={k + 7}"])
            launch(s, SIM, tmp_path / point / f"launch-{k}")
    a, b = load_side(tmp_path / "p0"), load_side(tmp_path / "p1")
    assert len(a.results) == 2
    result = compare(a, b)
    assert {m.method for m in result.metrics} == {"welch"}
    assert [d[0] for d in result.differences] == ["settings.target_qps"]
