"""The sim SUT through the whole engine agrees with queueing theory.

Theory's sojourn runs from a query's arrival at the queue, which for the sim is
when the engine sent it: `service_latency_ns`. Each case runs the engine once,
with its per-query log, and checks four links:

1. Recording is exact: the recorded summaries are those of the per-query
   stamps (done - sent, within HDR's 0.1%), and latency from schedule is lag
   plus sojourn.
2. The plan is Poisson: the first-come-first-served recursion (Lindley;
   Kiefer-Wolfowitz for 2 servers) over the *scheduled* arrivals and the sim's
   own service draws agrees with M/D/1 and M/M/c theory within 2% (mean) and
   5% (p99). Query counts are sized for that (`QUERIES`): each tolerance is at
   least 3 standard deviations of its statistic across seeds.
3. The engine's own figures agree with theory within the same tolerances, when
   it delivered the plan faithfully enough to judge: the rare long issue lags
   (host hiccups of 0.1-2 ms, some 20 a second on this VM even in a bare spin
   loop) clump arrivals and move the mean. The test measures that distortion
   (the recursion over the delivered arrivals, the log's send stamps, against
   the one over scheduled arrivals) and skips with the figure when it passes
   0.5%. On this VM it is typically 1-2% at a 25-50 us service time: the skip says
   so, and links 1 and 2 still hold the engine to the theory.
4. At millisecond service times the engine's own mean always meets theory: a
   few microseconds of issue lag are negligible there, so nothing is skipped
   (`test_engine_mean_latency_meets_md1_theory_at_millisecond_service`).
"""

from __future__ import annotations

import functools
import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.adapters.sim import ServiceTime, SimSut, service_draws
from loadgen.api import run_async, run_loop
from loadgen.plan.settings import settings_from_mapping
from loadgen.record.querylog import read_binary
from tests.fairness import skip_if_host_busy, skip_if_host_unfair
from tests.loadgen import queueing

SERVICE_NS = {1: 25_000, 2: 50_000}  # by servers: every case issues 24k-32k QPS, no more
SEED = 11
WARMUP_S = 0.5
# Measured queries by (service kind, utilisation), sized so that each of link 2's tolerances
# (2% on the mean, 5% on p99) is at least 3 standard deviations (SD) of its statistic across
# seeds: for a random seed a correct engine fails a given check with probability <= 0.3%
# (normal), and the seed is fixed, so the outcome repeats. The SD falls as c / sqrt(n) once
# n is far past the queue's correlation time; c (in % x sqrt(queries)) from the batch means
# and batch p99s of 12M-16M-query Lindley / Kiefer-Wolfowitz simulations (60-320 batches of
# 50k-200k queries), and n = (c / (tolerance / 3))**2, the larger of mean's and p99's:
#   M/D/1 0.6: mean c 192, p99 c 662 -> 160k    M/D/1 0.8: mean 530, p99 1300 -> 650k
#   M/M/2 0.6: mean c 355, p99 c 690 -> 290k    M/M/2 0.8: mean 870, p99 1800 -> 1.75M
# (before, 400k and 1.6M for both kinds: 4.8 SD for M/D/1 at both utilisations, more than
# needed; 3.6 and 2.9 SD for M/M/2, whose 0.8 case was the one under 3).
QUERIES = {("const", 0.6): 160_000, ("const", 0.8): 650_000, ("exp", 0.6): 290_000,
           ("exp", 0.8): 1_750_000}
MAX_DISTORTION = 0.005  # of the mean sojourn, from delivered against scheduled arrivals
CASES = [("const", 1, 0.6), ("const", 1, 0.8), ("exp", 2, 0.6), ("exp", 2, 0.8)]

# runs of up to 100 s of plan, which a busy host stretches past the default 300 s timeout;
# serial: issue lag on a loaded host clumps the arrivals and the figures skip (or miss theory)
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(1200)]


def _doc(result: Any) -> dict[str, Any]:
    """The result document, whether the run API returns it or a typed result (`to_dict()`)."""
    return result.to_dict() if hasattr(result, "to_dict") else result


def _mean_latency_ns(result: Any) -> float:
    """The engine's mean latency from the scheduled time, as its result reports it."""
    return float(_doc(result)["latency_ns"]["mean"])


def _run(settings: dict[str, Any], sut: SimSut) -> tuple[dict[str, Any], np.ndarray]:
    """One run through the public API, with its per-query log (rows in issue order)."""
    with tempfile.TemporaryDirectory() as tmp:
        result = run_loop(run_async(settings_from_mapping(settings), sut, log_dir=Path(tmp)))
        rows, _ = read_binary(Path(tmp))
    rows = np.sort(rows, order="query_id")  # issue order: the order the sim drew services
    assert np.array_equal(rows["query_id"], np.arange(rows.size))
    return _doc(result), rows


@dataclass(frozen=True)
class Case:
    result: dict[str, Any]  # the result document
    stamped: np.ndarray  # measured queries' done - sent, from the per-query log
    delivered: np.ndarray  # their sojourns in the recursion over the arrivals delivered
    planned: np.ndarray  # the same queries' sojourns over the scheduled arrivals
    theory_mean_ns: float
    theory_p99_ns: float


@functools.cache
def _case(kind: str, servers: int, rho: float) -> Case:
    rate = rho * servers / (SERVICE_NS[servers] / 1e9)
    service = ServiceTime(kind, SERVICE_NS[servers])
    result, rows = _run({"preset": "dev", "target_qps": rate, "target_latency_ms": 100,
                         "min_duration_s": 0, "min_query_count": QUERIES[kind, rho],
                         "warmup_s": WARMUP_S, "max_issue_lag_ms": 1000},
                        SimSut(service, servers=servers, seed=SEED))
    draws = [int(d) for d in itertools.islice(
        service_draws(service, np.random.default_rng(SEED)), rows.size)]
    measured = rows["scheduled_ns"] >= WARMUP_S * 1e9
    delivered = queueing.fcfs_sojourns(rows["sent_ns"].tolist(), draws, servers)[measured]
    planned = queueing.fcfs_sojourns(rows["scheduled_ns"].tolist(), draws, servers)[measured]
    s = SERVICE_NS[servers] / 1e9
    if kind == "const":
        mean, p99 = queueing.md1_mean(rate, s), queueing.md1_sojourn_quantile(0.99, rate, s)
    else:
        mean = queueing.mmc_mean(rate, s, servers)
        p99 = queueing.mmc_sojourn_quantile(0.99, rate, s, servers)
    stamped = (rows["done_ns"] - rows["sent_ns"])[measured]
    return Case(result, stamped, delivered, planned, mean * 1e9, p99 * 1e9)


@pytest.mark.parametrize(("kind", "servers", "rho"), CASES)
def test_recorded_sojourns_are_the_stamped_ones(kind, servers, rho):
    case = _case(kind, servers, rho)
    r = case.result
    skip_if_host_unfair(r)
    assert r["valid"], r["reasons"]
    assert r["queries"] == case.stamped.size
    sojourn = r["service_latency_ns"]
    assert sojourn["mean"] == pytest.approx(case.stamped.mean(), rel=1e-3)
    assert sojourn["p99"] == pytest.approx(np.percentile(case.stamped, 99), rel=1e-3)
    lag = r["issue_lag_ns"]
    assert r["latency_ns"]["mean"] == pytest.approx(lag["mean"] + sojourn["mean"], rel=2e-3)


@pytest.mark.parametrize(("kind", "servers", "rho"), CASES)
def test_the_planned_arrivals_make_the_queue_of_theory(kind, servers, rho):
    case = _case(kind, servers, rho)
    assert case.planned.mean() == pytest.approx(case.theory_mean_ns, rel=0.02)
    assert np.percentile(case.planned, 99) == pytest.approx(case.theory_p99_ns, rel=0.05)


@pytest.mark.parametrize(("kind", "servers", "rho"), CASES)
def test_the_engine_figures_agree_with_theory(kind, servers, rho):
    case = _case(kind, servers, rho)
    distortion = case.delivered.mean() / case.planned.mean() - 1
    if abs(distortion) > MAX_DISTORTION:
        lag = case.result["issue_lag_ns"]
        pytest.skip(f"issue lag (p99 {lag['p99'] / 1e3:.0f} us, max {lag['max'] / 1e3:.0f} us) "
                    f"moved the delivered queue's mean sojourn by {distortion:+.2%}: "
                    "not the Poisson queue of theory")
    sojourn = case.result["service_latency_ns"]
    assert sojourn["mean"] == pytest.approx(case.theory_mean_ns, rel=0.02)
    assert sojourn["p99"] == pytest.approx(case.theory_p99_ns, rel=0.05)


# link 4: issue lag of microseconds is negligible against a millisecond. M/D/1 in units of
# its service time is the same queue at any service time, so 1 ms for 20 s is the same
# ~14,000-query draw (and the same statistics, tolerance in SEs and power) as 2 ms for 40 s,
# in half the time.
MS_SERVICE_NS = 1_000_000
MS_RHO = 0.7
MS_DURATION_S = 20.0
MS_BATCHES = 20  # consecutive batches of ~700 queries (1 s) each
MS_Z = 5.0  # standard errors allowed (see the test's docstring)
HDR_REL = 1e-3  # the recorded mean's resolution: HDR at 3 significant digits


@functools.cache
def _ms_run() -> tuple[dict[str, Any], np.ndarray]:
    rate = MS_RHO / (MS_SERVICE_NS / 1e9)
    return _run({"preset": "dev", "target_qps": rate, "target_latency_ms": 100,
                 "min_duration_s": MS_DURATION_S, "min_query_count": 1, "warmup_s": WARMUP_S,
                 "max_issue_lag_ms": 1000},
                SimSut(ServiceTime("const", MS_SERVICE_NS), servers=1, seed=SEED))


def test_engine_mean_latency_meets_md1_theory_at_millisecond_service():
    """M/D/1, 1 ms service, utilisation 0.7, 20 s: the engine's mean latency is theory's.

    Theory: latency = S + rho S / (2 (1 - rho)) = 2.167 ms. A 20 s run is one draw of the
    M/D/1 sample mean, and its spread is the tolerance. Latencies in a queue are correlated
    (integrated autocorrelation time ~19 queries here, so the naive sigma / sqrt(n) of
    0.0125 ms is 4-5x too small), hence batch means: 20 consecutive batches of 1 s (~700
    queries, ~35 correlation times: near independent) give the standard error SE, ~0.05 ms.
    SE is taken from the queue of the *planned* arrivals (the recursion over the schedule with
    the sim's constant service), so host noise cannot widen its own tolerance; that queue is
    the draw theory is compared against, and the engine's figure is that queue plus its issue
    lag (Lindley is monotone in the arrival times). Allowed: MS_Z = 5 SE, plus HDR's 0.1%
    resolution of the recorded mean. Student's t (19 dof) puts |dev| > 4 SE at 0.08%, but a
    queue's batch means are right-skewed and their SE runs low when the batches are quiet:
    over 12 000 simulated M/D/1 runs of this size |dev| exceeded 4 SE in 0.22% and 5 SE in
    0.04%. The seed is fixed, so the planned part is repeatable and the rest is the engine's:
    a miss means its issue lag moved the mean by a quarter of a millisecond (a host that stalls
    for milliseconds, which the message shows), or the engine is wrong.
    """
    result, rows = _ms_run()
    skip_if_host_unfair(result)
    assert result["valid"], result["reasons"]
    measured = rows["scheduled_ns"] >= WARMUP_S * 1e9
    assert result["queries"] == measured.sum()
    planned = queueing.fcfs_sojourns(rows["scheduled_ns"].tolist(), [MS_SERVICE_NS] * rows.size,
                                     1)[measured].astype(np.float64)
    batch_means = [batch.mean() for batch in np.array_split(planned, MS_BATCHES)]
    se = float(np.std(batch_means, ddof=1)) / np.sqrt(MS_BATCHES)
    s = MS_SERVICE_NS / 1e9
    theory = queueing.md1_mean(MS_RHO / s, s) * 1e9
    mean = _mean_latency_ns(result)
    deviation, tolerance = mean - theory, MS_Z * se + HDR_REL * theory
    lag = result["issue_lag_ns"]
    if abs(deviation) > tolerance:  # the engine's part is its issue lag: judged on a quiet host
        skip_if_host_busy(result, f"issue lag (mean {lag['mean'] / 1e3:.0f} us, p99 "
                          f"{lag['p99'] / 1e3:.0f} us) moved the engine's mean latency "
                          f"{(mean - planned.mean()) / 1e3:+.0f} us off the planned queue's")
    assert abs(deviation) <= tolerance, (
        f"engine mean {mean / 1e6:.4f} ms vs theory {theory / 1e6:.4f} ms: {deviation / 1e3:+.1f} "
        f"us, allowed {tolerance / 1e3:.1f} us ({MS_Z:g} x SE {se / 1e3:.1f} us + HDR); of it, "
        f"the planned arrivals' queue {(planned.mean() - theory) / 1e3:+.1f} us, the engine "
        f"{(mean - planned.mean()) / 1e3:+.1f} us (issue lag mean {lag['mean'] / 1e3:.1f} us, "
        f"p99 {lag['p99'] / 1e3:.0f} us, max {lag['max'] / 1e3:.0f} us)")


def test_theory_references_are_sane():
    # M/M/1 special case: mean 1/(mu - lambda); p99 = ln(100) / (mu - lambda)
    mu, lam = 1000.0, 800.0
    assert queueing.mmc_mean(lam, 1 / mu, 1) == pytest.approx(1 / (mu - lam))
    assert queueing.mmc_sojourn_quantile(0.99, lam, 1 / mu, 1) == pytest.approx(
        4.60517 / (mu - lam), rel=1e-4)
    # M/D/1 at rho 0.5: mean = 1.5 D; wait CDF at 0 = 1 - rho; CDF rises to 1
    assert queueing.md1_mean(500, 1e-3) == pytest.approx(1.5e-3)
    assert queueing.md1_wait_cdf(0, 500, 1e-3) == pytest.approx(0.5)
    assert queueing.md1_wait_cdf(20e-3, 500, 1e-3) == pytest.approx(1.0, abs=1e-6)
    # a published M/D/1 figure: rho 0.8, P(wait <= D) = (1 - rho) e^(rho) = 0.4451
    assert queueing.md1_wait_cdf(1e-3, 800, 1e-3) == pytest.approx(0.2 * 2.225541, rel=1e-5)


def test_fcfs_recursion_by_hand():
    # one server: the second waits for the first; the third finds it idle
    assert queueing.fcfs_sojourns([0, 10, 100], [50, 50, 50], 1).tolist() == [50, 90, 50]
    # two servers: the third takes whichever frees first (the second, at 30)
    assert queueing.fcfs_sojourns([0, 10, 20], [100, 20, 5], 2).tolist() == [100, 20, 15]
