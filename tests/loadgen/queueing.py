"""Queueing theory references: M/D/1 and M/M/c sojourn-time mean and percentiles,
and the exact first-come-first-served recursion for given arrivals and service times."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

import numpy as np


def fcfs_sojourns(arrivals_ns: Iterable[int], services_ns: Iterable[int],
                  servers: int) -> np.ndarray:
    """Each customer's sojourn in a c-server FCFS queue (Kiefer-Wolfowitz; Lindley for c=1).

    Customers arrive in order; each takes the server that frees first.
    """
    free_at = [-(1 << 62)] * servers
    out = []
    for arrival, service in zip(arrivals_ns, services_ns, strict=True):
        done = max(arrival, free_at[0]) + service
        heapq.heapreplace(free_at, done)
        out.append(done - arrival)
    return np.array(out, dtype=np.int64)


def md1_mean(rate: float, service: float) -> float:
    """Mean sojourn (wait + service) of M/D/1 (Pollaczek-Khinchine)."""
    rho = rate * service
    return service + rho * service / (2 * (1 - rho))


def md1_wait_cdf(t: float, rate: float, service: float) -> float:
    """P(wait <= t) for M/D/1 (Erlang/Crommelin's formula).

    The series alternates and cancels badly for large t / service, so callers keep
    t within a few dozen service times (fsum keeps the rounding of the terms only).
    """
    rho = rate * service
    terms = []
    for k in range(math.floor(t / service) + 1):
        x = rate * (k * service - t)
        terms.append((x**k) / math.factorial(k) * math.exp(-x))
    return (1 - rho) * math.fsum(terms)


def md1_sojourn_quantile(q: float, rate: float, service: float) -> float:
    """Sojourn time at quantile q of M/D/1: service + the wait quantile."""
    hi = service
    while md1_wait_cdf(hi, rate, service) < q:  # bracket from below: small t, few terms
        hi *= 1.5
    return service + _bisect(lambda t: md1_wait_cdf(t, rate, service) - q, 0.0, hi)


def erlang_c(servers: int, offered: float) -> float:
    """Probability of waiting in M/M/c with offered load a = rate / mu."""
    rho = offered / servers
    top = offered**servers / math.factorial(servers) / (1 - rho)
    bottom = sum(offered**k / math.factorial(k) for k in range(servers)) + top
    return top / bottom


def mmc_mean(rate: float, service: float, servers: int) -> float:
    """Mean sojourn of M/M/c."""
    mu = 1 / service
    return service + erlang_c(servers, rate / mu) / (servers * mu - rate)


def mmc_sojourn_quantile(q: float, rate: float, service: float, servers: int) -> float:
    """Sojourn quantile of M/M/c: wait (0, or exponential with rate c*mu - lambda) + Exp(mu)."""
    mu = 1 / service
    theta = servers * mu - rate
    c = erlang_c(servers, rate / mu)

    def tail(t: float) -> float:
        both = (theta * math.exp(-mu * t) - mu * math.exp(-theta * t)) / (theta - mu)
        return (1 - c) * math.exp(-mu * t) + c * both

    return _bisect(lambda t: (1 - tail(t)) - q, 0.0, 500 * service)


def _bisect(f, lo: float, hi: float) -> float:
    for _ in range(200):
        mid = (lo + hi) / 2
        if f(mid) < 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
