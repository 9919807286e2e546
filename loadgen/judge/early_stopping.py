"""MLPerf LoadGen's early-stopping criterion, as pure functions.

The rule (mlcommons/inference, loadgen/early_stopping.cc and results.cc):

- Null hypothesis: the system's true p-th percentile latency is exactly the
  bound, so each query independently goes over it with probability
  q = 1 - (p/100 - tolerance). MLPerf uses tolerance 0 and confidence 0.99.
- A run of n queries of which t went over the bound *passes* when, under that
  hypothesis, seeing t or fewer over-latency queries would be rare:

      P(Binomial(n, q) <= t) < 1 - confidence          (strictly less)

  MLPerf writes this as BetaRegularized(p - d, h, t + 1) < 1 - c with
  h = n - t under-latency queries, finds the least passing h for each t, and
  passes the run when n >= h + t. The two forms are the same test, because the
  probability falls as h grows.
- Server: t counts queries whose latency is strictly above the target latency.
  At p99, 459 queries with none over pass; 10,000 queries may have 77 over.
- SingleStream / MultiStream: no fixed bound. With t the most over-latency
  queries that n queries allow (at least 1 is needed, otherwise the run is too
  short: 64 queries at p90, 662 at p99), the t-th largest latency, i.e. the
  one at 1-based rank n - t + 1 of the sorted latencies, is reported as
  the "early stopping percentile estimate". It is at or above the true
  percentile with 99% confidence: the run would pass with the bound set there.

MLPerf evaluates BetaRegularized with a truncated hypergeometric series
(term tolerance 2**-33) and searches h inside heuristic brackets; here the
binomial tail is summed exactly in log space (math.lgamma, log1p) and the
searches are plain bisections, so results agree except, in principle, where
the probability lies within ~1e-9 of the threshold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "estimate_rank",
    "max_overlatency",
    "min_queries",
    "passes",
    "percentile_estimate",
]


def _overlatency_probability(percentile: float, confidence: float, tolerance: float) -> float:
    if not 0.0 < percentile < 100.0:
        raise ValueError(f"percentile must be in (0, 100), got {percentile}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    under = percentile / 100.0 - tolerance
    if not 0.0 < under < 1.0 or tolerance < 0.0:
        raise ValueError(f"tolerance {tolerance} leaves no valid probability at p{percentile}")
    return 1.0 - under


def _log_cdf(n: int, t: int, q: float) -> float:
    """log P(Binomial(n, q) <= t), summed exactly in log space."""
    log_q, log_p = math.log(q), math.log1p(-q)
    log_n_fact = math.lgamma(n + 1)
    terms = [
        log_n_fact - math.lgamma(k + 1) - math.lgamma(n - k + 1) + k * log_q + (n - k) * log_p
        for k in range(t + 1)
    ]
    top = max(terms)
    return top + math.log(math.fsum(math.exp(x - top) for x in terms))


def _passes(n: int, t: int, q: float, confidence: float) -> bool:
    return _log_cdf(n, t, q) < math.log1p(-confidence)


def _check_counts(n: int, overlatency: int) -> None:
    if n < 0 or not 0 <= overlatency <= n:
        raise ValueError(f"need 0 <= overlatency <= n, got overlatency={overlatency} n={n}")


def passes(
    n: int,
    overlatency: int,
    percentile: float,
    confidence: float = 0.99,
    *,
    tolerance: float = 0.0,
) -> bool:
    """Whether n queries with `overlatency` of them over the bound pass early stopping."""
    _check_counts(n, overlatency)
    q = _overlatency_probability(percentile, confidence, tolerance)
    return _passes(n, overlatency, q, confidence)


def min_queries(
    percentile: float,
    overlatency: int,
    confidence: float = 0.99,
    *,
    tolerance: float = 0.0,
) -> int:
    """Fewest queries that let a run with `overlatency` queries over the bound pass.

    At p99: 459 with none over, 662 with one over.
    """
    if overlatency < 0:
        raise ValueError(f"overlatency must be >= 0, got {overlatency}")
    q = _overlatency_probability(percentile, confidence, tolerance)
    # passing is monotone in n: double until it passes, then bisect
    low, high = overlatency + 1, overlatency + 1
    while not _passes(high, overlatency, q, confidence):
        low, high = high + 1, 2 * high
    while low < high:
        mid = (low + high) // 2
        if _passes(mid, overlatency, q, confidence):
            high = mid
        else:
            low = mid + 1
    return low


def max_overlatency(
    n: int,
    percentile: float,
    confidence: float = 0.99,
    *,
    tolerance: float = 0.0,
) -> int:
    """Most over-latency queries n queries may have and still pass; -1 when none.

    At p99, 10,000 queries allow 77.
    """
    _check_counts(n, 0)
    q = _overlatency_probability(percentile, confidence, tolerance)
    if not _passes(n, 0, q, confidence):
        return -1
    # passing is monotone in t: double until it fails (t = n always fails), then bisect
    good, bad = 0, 1
    while bad < n and _passes(n, bad, q, confidence):
        good, bad = bad, min(2 * bad + 1, n)
    while bad - good > 1:
        mid = (good + bad) // 2
        if _passes(n, mid, q, confidence):
            good = mid
        else:
            bad = mid
    return good


def estimate_rank(
    n: int,
    percentile: float,
    confidence: float = 0.99,
    *,
    tolerance: float = 0.0,
) -> int | None:
    """1-based rank, in n sorted latencies, of MLPerf's early-stopping percentile estimate.

    That is n - t + 1 where t = max_overlatency(n, ...), the t-th largest
    latency; None when t < 1 (too few queries to estimate anything).
    """
    t = max_overlatency(n, percentile, confidence, tolerance=tolerance)
    if t < 1:
        return None
    return n - t + 1


def percentile_estimate(
    sorted_latencies: Sequence[int] | npt.NDArray[np.integer],
    percentile: float,
    confidence: float = 0.99,
    *,
    tolerance: float = 0.0,
) -> int | None:
    """The early-stopping percentile estimate from latencies sorted ascending; None if too few."""
    rank = estimate_rank(len(sorted_latencies), percentile, confidence, tolerance=tolerance)
    if rank is None:
        return None
    return int(sorted_latencies[rank - 1])
