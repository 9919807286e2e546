"""The sim SUT through the whole engine agrees with queueing theory.

Theory's sojourn runs from a query's arrival at the queue, which for the sim is
when the engine sent it: `service_latency_ns`. Each case runs the engine once,
with its per-query log, and checks three links:

1. Recording is exact: the recorded summaries are those of the per-query
   stamps (done - sent, within HDR's 0.1%), and latency from schedule is lag
   plus sojourn.
2. The plan is Poisson: the first-come-first-served recursion (Lindley;
   Kiefer-Wolfowitz for 2 servers) over the *scheduled* arrivals and the sim's
   own service draws agrees with M/D/1 and M/M/c theory within 2% (mean) and
   5% (p99). Query counts are sized for that: at utilisation 0.6, 400k queries
   spread the mean by < 0.7% and p99 by < 2% across seeds; at 0.8 that takes
   1.6M.
3. The engine's own figures agree with theory within the same tolerances, when
   it delivered the plan faithfully enough to judge: the rare long issue lags
   (host hiccups of 0.1-2 ms, some 20 a second on this VM even in a bare spin
   loop) clump arrivals and move the mean. The test measures that distortion
   (the recursion over the delivered arrivals, the log's send stamps, against
   the one over scheduled arrivals) and skips with the figure when it passes
   0.5%. On this VM it is typically 1-2% at a 50 us service time: the skip says
   so, and links 1 and 2 still hold the engine to the theory.
"""

from __future__ import annotations

import functools
import itertools
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from loadgen.adapters.sim import ServiceTime, SimSut, service_draws
from loadgen.api import run_async, run_loop
from loadgen.record.querylog import read_binary
from loadgen.plan.settings import load_settings
from tests.loadgen import queueing

SERVICE_NS = 50_000
SEED = 11
WARMUP_S = 0.5
QUERIES = {0.6: 400_000, 0.8: 1_600_000}
MAX_DISTORTION = 0.005  # of the mean sojourn, from delivered against scheduled arrivals
CASES = [("const", 1, 0.6), ("const", 1, 0.8), ("exp", 2, 0.6), ("exp", 2, 0.8)]

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Case:
    result: dict
    stamped: np.ndarray  # measured queries' done - sent, from the per-query log
    delivered: np.ndarray  # their sojourns in the recursion over the arrivals delivered
    planned: np.ndarray  # the same queries' sojourns over the scheduled arrivals
    theory_mean_ns: float
    theory_p99_ns: float


@functools.cache
def _case(kind: str, servers: int, rho: float) -> Case:
    rate = rho * servers / (SERVICE_NS / 1e9)
    settings = load_settings(None, [
        "preset='dev'", f"target_qps={rate}", "target_latency_ms=100", "min_duration_s=0",
        f"min_query_count={QUERIES[rho]}", f"warmup_s={WARMUP_S}", "max_issue_lag_ms=1000"])
    service = ServiceTime(kind, SERVICE_NS)
    with tempfile.TemporaryDirectory() as tmp:
        result = run_loop(run_async(settings, SimSut(service, servers=servers, seed=SEED),
                                    log_dir=Path(tmp)))
        rows, _ = read_binary(Path(tmp))
    rows = np.sort(rows, order="query_id")  # issue order: the order the sim drew services
    assert np.array_equal(rows["query_id"], np.arange(rows.size))
    draws = [int(d) for d in itertools.islice(
        service_draws(service, np.random.default_rng(SEED)), rows.size)]
    measured = rows["scheduled_ns"] >= WARMUP_S * 1e9
    delivered = queueing.fcfs_sojourns(rows["sent_ns"].tolist(), draws, servers)[measured]
    planned = queueing.fcfs_sojourns(rows["scheduled_ns"].tolist(), draws, servers)[measured]
    s = SERVICE_NS / 1e9
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
