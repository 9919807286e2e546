"""loadgen.judge.early_stopping against MLPerf's figures, scipy, and a seeded simulation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import special, stats  # type: ignore[import-untyped]

from loadgen.judge.early_stopping import (
    estimate_rank,
    max_overlatency,
    min_queries,
    passes,
    percentile_estimate,
)

# "Would discard D highest latency queries" (D = t - 1) for n SingleStream queries
# at p90, from MLPerf LoadGen result summaries.
MLPERF_P90_DISCARDS = {7469: 685, 2048: 172, 2145: 181, 2116: 178}


def test_mlperf_server_figures() -> None:
    assert min_queries(99, 0) == 459
    assert passes(459, 0, 99) and not passes(458, 0, 99)
    assert max_overlatency(10_000, 99) == 77
    assert passes(10_000, 77, 99) and not passes(10_000, 78, 99)
    assert max_overlatency(458, 99) == -1


def test_mlperf_single_stream_figures() -> None:
    assert min_queries(90, 1) == 64  # "Processed at least 64 queries"
    assert min_queries(99, 1) == 662
    assert estimate_rank(63, 90) is None and estimate_rank(64, 90) == 64
    for n, discarded in MLPERF_P90_DISCARDS.items():
        t = discarded + 1
        assert max_overlatency(n, 90) == t
        assert estimate_rank(n, 90) == n - t + 1


@pytest.mark.parametrize("percentile", [90.0, 99.0, 99.9])
def test_min_queries_and_max_overlatency_agree(percentile: float) -> None:
    previous = 0
    for t in [*range(12), 50, 77, 200]:
        n = min_queries(percentile, t)
        assert n > previous  # strictly more queries for each extra over-latency query
        previous = n
        assert passes(n, t, percentile) and not passes(n - 1, t, percentile)
        assert max_overlatency(n, percentile) >= t > max_overlatency(n - 1, percentile)


def test_monotone() -> None:
    allowed = [max_overlatency(n, 99) for n in range(400, 5_000, 37)]
    assert allowed == sorted(allowed)
    for n in (700, 5_000, 50_000):
        by_percentile = [max_overlatency(n, p) for p in (50, 90, 95, 99, 99.9)]
        assert by_percentile == sorted(by_percentile, reverse=True)
        by_confidence = [max_overlatency(n, 90, c) for c in (0.5, 0.9, 0.95, 0.99, 0.999)]
        assert by_confidence == sorted(by_confidence, reverse=True)
    # a tolerance d tests p - d instead of p: more over-latency queries are allowed
    assert max_overlatency(10_000, 99, tolerance=0.001) > max_overlatency(10_000, 99)


@pytest.mark.parametrize("percentile", [50.0, 90.0, 99.0, 99.9])
def test_min_queries_matches_scipy_binomial(percentile: float) -> None:
    q = 1 - percentile / 100
    for t in (0, 1, 2, 5, 10, 77):
        ns = np.arange(t + 1, 300_000)
        passing = ns[stats.binom.cdf(t, ns, q) < 0.01]
        assert min_queries(percentile, t) == passing[0]


def test_passes_matches_scipy_and_mlperf_beta_form() -> None:
    rng = np.random.default_rng(11)
    for percentile in (90.0, 99.0, 99.9):
        p = percentile / 100
        for n in rng.integers(50, 200_000, size=40).tolist():
            t = int(rng.integers(0, max(1, int(n * (1 - p) * 1.3))))
            tail = stats.binom.cdf(t, n, 1 - p)
            # MLPerf's form: BetaRegularized(p, h, t + 1) with h = n - t
            assert math.isclose(special.betainc(n - t, t + 1, p), tail, rel_tol=1e-9)
            if abs(tail - 0.01) > 1e-9:
                assert passes(n, t, percentile) == (tail < 0.01)


def test_estimate_is_an_upper_bound_99_percent_of_the_time() -> None:
    rng = np.random.default_rng(2024)
    for percentile, n, trials in ((90.0, 1_000, 2_000), (99.0, 3_000, 1_000)):
        truth = -math.log(1 - percentile / 100)  # percentile of Exp(1)
        rank = estimate_rank(n, percentile)
        assert rank is not None
        estimates = np.sort(rng.exponential(size=(trials, n)), axis=1)[:, rank - 1]
        covered = float(np.mean(estimates >= truth))
        assert covered >= 0.99, (percentile, covered)
        # the exact coverage: fewer than t draws above the truth
        t = n - rank + 1
        assert covered == pytest.approx(stats.binom.sf(t - 1, n, 1 - percentile / 100), abs=0.01)


def test_percentile_estimate_picks_from_sorted_values() -> None:
    latencies = list(range(100, 2_148))  # 2048 sorted latencies
    t = MLPERF_P90_DISCARDS[2048] + 1
    assert percentile_estimate(latencies, 90) == latencies[-t]
    assert percentile_estimate(np.array(latencies, dtype=np.int64), 90) == latencies[-t]
    assert percentile_estimate(latencies[:63], 90) is None
    assert percentile_estimate([], 90) is None


@pytest.mark.parametrize(
    "call",
    [
        lambda: min_queries(0, 1),
        lambda: min_queries(100, 1),
        lambda: min_queries(99, -1),
        lambda: max_overlatency(100, 99, confidence=1.0),
        lambda: max_overlatency(-1, 99),
        lambda: passes(10, 11, 99),
        lambda: passes(10, 1, 99, tolerance=-0.1),
        lambda: estimate_rank(100, 99, tolerance=0.99),
    ],
)
def test_bad_arguments_raise(call: object) -> None:
    with pytest.raises(ValueError):
        call()  # type: ignore[operator]


def test_agrees_with_mlperf_loadgen(tmp_path: Path) -> None:
    """The real LoadGen (bench extra), run on a null SUT, discards what we predict."""
    lg = pytest.importorskip("mlperf_loadgen")

    def issue(queries: list[object]) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(q.id, 0, 0) for q in queries])  # type: ignore[attr-defined]

    for percentile, n in ((90.0, 64), (90.0, 1_000), (99.0, 661), (99.0, 3_000)):
        settings = lg.TestSettings()
        settings.scenario = lg.TestScenario.SingleStream
        settings.mode = lg.TestMode.PerformanceOnly
        settings.single_stream_expected_latency_ns = 100_000
        settings.min_query_count = settings.max_query_count = n
        settings.min_duration_ms = settings.max_duration_ms = 0
        settings.single_stream_target_latency_percentile = percentile / 100
        logs = lg.LogSettings()
        logs.log_output.outdir = str(tmp_path)
        sut = lg.ConstructSUT(issue, lambda: None)
        qsl = lg.ConstructQSL(1024, 1024, lambda _: None, lambda _: None)
        lg.StartTestWithLogSettings(sut, qsl, settings, logs)
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
        summary = (tmp_path / "mlperf_log_summary.txt").read_text()
        rank = estimate_rank(n, percentile)
        if rank is None:
            assert f"Need to process at least {min_queries(percentile, 1)} queries" in summary
        else:
            assert f"Would discard {n - rank} highest latency queries" in summary
