"""compare: intervals from launches (Welch) and from single runs (HDR order statistics,
Poisson counts); construct mismatches flagged with exit code 4, and not otherwise."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.campaigns.compare import (
    Side,
    compare,
    construct_differences,
    load_side,
    render,
    t_quantile,
)
from loadgen.campaigns.launch import launch
from loadgen.cli.main import main
from loadgen.errors import ResultError
from loadgen.judge.verdict import ReasonCode
from loadgen.plan.settings import load_settings
from loadgen.report.result import RunResult, read_result
from tests.loadgen.campaigns.test_search import fake_document

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


def _fake(qps: float, p99: float, seed: int = 1) -> RunResult:
    lat = {"p50": p99 / 2, "p90": p99 / 1.5, "p99": p99}
    settings = load_settings(None, ["preset='dev'", "target_latency_ms=2", "target_qps=100",
                                    f"schedule_rng_seed={seed}"])
    figures = {"qps_scheduled": qps, "qps_completed": qps, "goodput_qps": qps,
               "samples_per_s": qps, "query_latency_ns": lat,
               "headline": {"name": "scheduled_qps", "value": qps}, "duration_s": 10.0,
               "valid": True, "sut": {"sut": "x"}, "environment": {}}
    return RunResult.from_dict(fake_document(settings, 0.5) | figures)


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


# A result.json as version 1 of loadgen wrote it (a sim run with errors, over its SLO and
# behind its schedule; its environment shortened): no plan, no reason_codes, no
# target_latency_at_ns, schema_version 1.
V1_RESULT: dict[str, Any] = {
    "schema_version": 1, "scenario": "Server", "mode": "performance", "valid": False,
    "reasons": [
        "5 queries failed (sim_error=5): a valid run has none",
        ("39 of 65 queries over 1.050 ms: early stopping at p99 with 99% confidence allows 0; "
         "needs at least 5608 queries for that count, or a lower target_qps"),
        ("p99 issue lag 6.484 ms exceeds max_issue_lag_ms 0.001: the load generator fell behind "
         "its schedule, so this measures the harness, not the SUT; lower target_qps or add "
         "load processes")],
    "warnings": [
        "preset 'dev': settings below MLPerf minimums, not a compliant result",
        "no warm-up (warmup_s = 0): cold-start effects are inside the measurement",
        ("only 1 samples beyond p99: the percentile is poorly resolved; run at least 9999 "
         "queries")],
    "headline": {"name": "scheduled_qps", "value": 349.4254641690493},
    "settings": {
        "scenario": "Server", "preset": "dev", "mode": "performance", "arrival": "poisson",
        "burstiness": 1.0, "burst_qps_factor": 3.0, "burst_start_s": 0.0,
        "burst_duration_s": 0.0, "burst_period_s": 0.0, "steps": [], "ramp": False,
        "trace_file": "", "time_scale": 1.0, "schedule_file": "", "window_s": 0.1,
        "workers": 1, "concurrency": 1, "target_qps": 300.0, "target_latency_ms": 1.05,
        "target_latency_percentile": 99.0, "min_duration_s": 0.2, "max_duration_s": 0.0,
        "min_query_count": 50, "max_query_count": 0, "samples_per_query": 1,
        "total_sample_count": 1024, "performance_sample_count": 1024,
        "qsl_rng_seed": 3066443479025735752, "sample_index_rng_seed": 10688027786191513374,
        "schedule_rng_seed": 14962580496156340209, "warmup_s": 0.0, "query_timeout_ms": 0.0,
        "drain_timeout_s": 10.0, "max_issue_lag_ms": 0.001, "accuracy_target": 0.0,
        "compliant": False},
    "seeds": {"qsl": 3066443479025735752, "sample_index": 10688027786191513374,
              "schedule": 14962580496156340209},
    "sut": {"sut": "sim", "service": "const", "service_mean_ns": 1000000, "service_sigma": 0.5,
            "servers": 1, "seed": 0, "error_rate": 0.05, "stall_after_s": 0.0},
    "environment": {"python": "3.11.7", "packages": {"loadgen": "0.1.0", "numpy": "2.4.6"},
                    "cpu": "Intel(R) Xeon(R) Processor", "cpu_count": 2, "gpus": [],
                    "git_commit": None},
    "queries": 65, "samples": 65, "errors": 5, "errors_by_kind": {"sim_error": 5},
    "unfinished": 0, "late": 0, "duration_s": 0.201285984,
    "qps_scheduled": 349.4254641690493, "qps_completed": 322.9236269128406,
    "samples_per_s": 322.9236269128406, "goodput_qps": 129.16945076513625, "overlatency": 39,
    "latency_ns": {"p50": 1754111, "p90": 4546559, "p95": 4935679, "p99": 8372223,
                   "p999": 8470527, "mean": 2201789, "min": 1002496, "max": 8470527,
                   "count": 65},
    "service_latency_ns": {"p50": 1007103, "p90": 2461695, "p95": 2955263, "p99": 3692543,
                           "p999": 4546559, "mean": 1495938, "min": 1000960, "max": 4546559,
                           "count": 65},
    "issue_lag_ns": {"p50": 2711, "p90": 2824191, "p95": 3932159, "p99": 6483967,
                     "p999": 7368703, "mean": 655726, "min": 805, "max": 7368703, "count": 70},
    "query_latency_ns": {"p50": 1754111, "p90": 4546559, "p95": 4935679, "p99": 8372223,
                         "p999": 8470527, "mean": 2201789, "min": 1002496, "max": 8470527,
                         "count": 65},
    "components_ns": {}, "batch_sizes": {},
    "early_stopping": {"percentile": 99.0, "confidence": 0.99, "queries": 65,
                       "target_latency_ns": 1050000, "overlatency": 39,
                       "max_overlatency_allowed": -1, "min_queries_needed": 5608,
                       "passes": False},
    "interrupted": False, "out_of_range": 0,
    "timeline": [{"start_s": 0.0, "end_s": 0.1, "queries": 32, "good": 16, "errors": 5,
                  "latency_ns": {"p50": 1032191, "p90": 3801087, "p95": 3833855,
                                 "p99": 4947967, "p999": 4947967, "mean": 1910528,
                                 "min": 999424, "max": 4947967, "count": 32}}],
    "steps": [],
    "histograms": {
        "latency_ns":
            "HISTFAAAAIx4nC2KoQ5BcRyFf+e7v925uzMzwWwEUWITBOEmPIZkgsALaLrgBVTFpimeQDZJkkzRzeZv"
            "1ynn7DtffbWpmNnC8kT/VpjDznFr2SsH573AYy8IxbgnkNJnF5FxhxJT5tzwkygyoMeIRjAuCn+bh2jx"
            "FAliSZMykx97wzhoa/GBGV2qHMQ1pcYXKBcXBw==",
        "service_latency_ns":
            "HISTFAAAAG14nJNpmSzMwMAQyAABzFCaEch0M9ixgMH+A0Tg6DpGDg4uLg4ONiZGJiYmZhD1l5nJluk7"
            "E1M6Uy7TXaDgXkamUCZzJmcmTiDkZWIFKmO6yMhkzWTM9JKRaSkzkyKTMFMq01MWpsmsTADDBhEg",
        "issue_lag_ns":
            "HISTFAAAALV4nC2NsQtBYRTFv/v7kKcnSTaLUQYMJoOkGGSS2WCS0WA0PItRBqtFomRSJJkMMhhk8idY"
            "GA3K9+Iu59xzf6cb648iSqmF+o3+qxhbSm8mKv/8BSebJGtoETXGMtohRA5NGEdM4GUvZp8KTYZCgRpj"
            "4S3UySL06FJ2yZ2YToWMewqRgoFQZe3hgIESbIWz8IGLJk6bq80xyL3IzWYGToAHvDU0eFnuJ8dnqBQr"
            "mPtZar6hzyX6",
        "query_latency_ns":
            "HISTFAAAAIx4nC2KoQ5BcRyFf+e7v925uzMzwWwEUWITBOEmPIZkgsALaLrgBVTFpimeQDZJkkzRzeZv"
            "1ynn7DtffbWpmNnC8kT/VpjDznFr2SsH573AYy8IxbgnkNJnF5FxhxJT5tzwkygyoMeIRjAuCn+bh2jx"
            "FAliSZMykx97wzhoa/GBGV2qHMQ1pcYXKBcXBw=="},
    "schedule": {"arrival": "poisson", "process": {"kind": "poisson", "rate_qps": 300.0},
                 "seed": 14962580496156340209, "loadgen_version": "0.1.0",
                 "numpy_version": "2.4.6", "file": "schedule.bin", "queries": 70,
                 "sha256": "fabb4c2103f26059ee47ba78b4c5a09637938e775f802c543c86c66cdd7d286d"},
}


def test_a_version_1_result_still_reports_and_compares(tmp_path: Path, runs: dict[str, Path],
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    for name, qps in (("a", 300.0), ("b", 600.0)):
        doc = json.loads(json.dumps(V1_RESULT))
        doc["settings"]["target_qps"] = qps
        (tmp_path / name).mkdir()
        (tmp_path / name / "result.json").write_text(json.dumps(doc, indent=2))
    a, b = tmp_path / "a", tmp_path / "b"
    result = read_result(a)
    assert result.plan == {} and not result.valid
    assert result.to_dict()["schema_version"] == 2  # written back, it is this version
    assert result.verdict.codes == (ReasonCode.ERRORS, ReasonCode.EARLY_STOPPING,
                                    ReasonCode.ISSUE_LAG)
    assert [r.text for r in result.verdict.reasons] == V1_RESULT["reasons"]
    assert result.stats.target_latency_at_ns == V1_RESULT["query_latency_ns"]["p99"]
    unknown = json.loads(json.dumps(V1_RESULT)) | {"reasons": ["no rule wrote this"]}
    (tmp_path / "odd.json").write_text(json.dumps(unknown))
    with pytest.raises(ResultError, match="no version-1 rule wrote"):
        read_result(tmp_path / "odd.json")
    assert main(["report", str(a)]) == 0
    page = (a / "report.html").read_text()
    for code, start in (("errors", "5 queries failed"), ("early_stopping", "39 of 65 queries"),
                        ("issue_lag", "p99 issue lag 6.484 ms")):
        assert f"[{code}] {start}" in page
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "differs: settings.target_qps: 300.0 -> 600.0" in out and "mismatch" not in out
    assert "latency_p99 " in out and "order-statistic" in out
    # beside a result of this version: both read, and their constructs differ
    assert main(["compare", str(a), str(runs["a"])]) == 4
    assert "construct mismatch" in capsys.readouterr().out


def test_endpoints_that_say_different_things_are_refused_unless_told() -> None:
    def at(version: str) -> RunResult:
        return dataclasses.replace(_fake(100, 1e6), endpoint={
            "base": "http://127.0.0.1:8000", "identity": {"models": ["m"], "version": {
                "version": version}}, "gpu": None, "baseline_rtt": {"min_ns": 1}})

    a, b = Side("a", (at("0.11.0"),)), Side("b", (at("0.12.0"),))
    result = compare(a, b)
    assert result.mismatch and [k for k, _, _ in result.differences] == [
        "endpoint.identity.version.version"]
    assert not compare(a, b, ["endpoint"]).mismatch
    here = at("0.11.0")
    assert here.endpoint is not None
    moved = dataclasses.replace(here, endpoint=here.endpoint | {"base": "http://10.0.0.2:8000"})
    assert not compare(a, Side("b", (moved,))).mismatch  # where it is is not what it is
