"""VALID or INVALID, with every reason; warnings for the usual pitfalls.

Pure: (settings, stats) -> Verdict. Each rule is one small function returning
a reason (with what to do about it) or None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadgen.plan.settings import Scenario, TestSettings
from loadgen.judge.stats import RunStats

__all__ = ["RULES", "Verdict", "evaluate", "headline"]

Rule = Callable[[TestSettings, RunStats], "str | None"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judgement of one run."""

    valid: bool
    reasons: tuple[str, ...]
    warnings: tuple[str, ...]


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def min_duration(s: TestSettings, r: RunStats) -> str | None:
    if r.duration_s + 1e-9 < s.min_duration_s:
        return (f"measured duration {r.duration_s:.2f} s is below min_duration_s "
                f"{s.min_duration_s:g} s: run longer")
    return None


def min_queries(s: TestSettings, r: RunStats) -> str | None:
    if s.mode == "accuracy":
        return None
    if s.scenario is Scenario.OFFLINE:
        if r.samples < s.offline_sample_count:
            return (f"{r.samples} samples completed, Offline needs {s.offline_sample_count}: "
                    "lower target_qps or fix the errors")
        return None
    if r.queries < s.min_query_count:
        return f"{r.queries} queries completed, below min_query_count {s.min_query_count}"
    return None


def no_errors(s: TestSettings, r: RunStats) -> str | None:
    if r.errors or r.unfinished:
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(r.errors_by_kind.items()))
        return f"{r.errors} queries failed ({kinds}): a valid run has none"
    return None


def latency_slo(s: TestSettings, r: RunStats) -> str | None:
    es = r.early_stopping
    if "passes" not in es or s.scenario is not Scenario.SERVER or s.mode == "accuracy":
        return None
    if not es["passes"]:
        return (f"{es['overlatency']} of {es['queries']} queries over {_ms(es['target_latency_ns'])}"
                f": early stopping at p{s.target_latency_percentile:g} with 99% confidence "
                f"allows {max(es['max_overlatency_allowed'], 0)}; needs at least "
                f"{es['min_queries_needed']} queries for that count, or a lower target_qps")
    return None


def issue_lag(s: TestSettings, r: RunStats) -> str | None:
    lag = r.issue_lag_ns["p99"]
    if s.scenario in (Scenario.SERVER,) and lag > s.max_issue_lag_ms * 1e6:
        return (f"p99 issue lag {_ms(lag)} exceeds max_issue_lag_ms {s.max_issue_lag_ms:g}: "
                "the load generator fell behind its schedule, so this measures the harness, "
                "not the SUT; lower target_qps or add load processes")
    return None


def not_interrupted(s: TestSettings, r: RunStats) -> str | None:
    return "the run was interrupted before it finished" if r.interrupted else None


RULES: tuple[Rule, ...] = (not_interrupted, min_duration, min_queries, no_errors, latency_slo,
                           issue_lag)


def _warnings(s: TestSettings, r: RunStats) -> list[str]:
    out = []
    if not s.compliant:
        out.append(f"preset {s.preset!r}: settings below MLPerf minimums, not a compliant result")
    if s.warmup_s == 0 and s.scenario is not Scenario.OFFLINE and s.mode == "performance":
        out.append("no warm-up (warmup_s = 0): cold-start effects are inside the measurement")
    tail = r.queries * (1 - s.target_latency_percentile / 100)
    if s.scenario is not Scenario.OFFLINE and r.queries and tail < 100:
        out.append(f"only {tail:.0f} samples beyond p{s.target_latency_percentile:g}: the "
                   "percentile is poorly resolved; run at least "
                   f"{int(100 / (1 - s.target_latency_percentile / 100))} queries")
    lat = r.query_latency_ns
    if lat["p50"] and lat["mean"] > 2 * lat["p50"]:
        out.append(f"mean latency {_ms(lat['mean'])} is over twice the median {_ms(lat['p50'])}: "
                   "a heavy tail or stalls; read the percentiles, not the mean")
    if s.scenario is Scenario.SERVER and s.arrival == "closed":
        out.append("closed-loop arrivals labelled as Server: the offered load adapts to the SUT, "
                   "so latency is understated (coordinated omission); use poisson")
    if r.out_of_range:
        out.append(f"{r.out_of_range} values outside the histogram range were not recorded")
    if r.late:
        out.append(f"{r.late} completions arrived after their query had already timed out")
    return out


def evaluate(s: TestSettings, r: RunStats, extra_reasons: tuple[str, ...] = (),
             extra_warnings: tuple[str, ...] = ()) -> Verdict:
    """Apply every rule; any reason makes the run INVALID."""
    reasons = tuple(reason for rule in RULES if (reason := rule(s, r)) is not None)
    reasons += extra_reasons
    return Verdict(not reasons, reasons, extra_warnings + tuple(_warnings(s, r)))


def headline(s: TestSettings, r: RunStats) -> tuple[str, float]:
    """The scenario's headline metric: (name, value)."""
    if s.scenario is Scenario.SERVER:
        return "scheduled_qps", r.qps_scheduled
    if s.scenario is Scenario.OFFLINE:
        return "samples_per_s", r.samples_per_s
    estimate = r.early_stopping.get("estimate_ns")
    key = "p90" if s.scenario is Scenario.SINGLE_STREAM else "p99"
    name = f"{key}_latency_ns" if estimate is None else f"early_stopping_{key}_latency_ns"
    return name, float(r.query_latency_ns[key] if estimate is None else estimate)
