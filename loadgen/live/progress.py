"""Progress lines on long runs: the plan before the first query, then where the run stands.

A run ends once both minimums are met (measured duration and measured queries), so
its progress is the lesser of the two fractions, and its ETA the longer of the two
remainders: the time still to run, and the queries still to issue at the rate seen
so far. Before the first query one line states the plan and how long it should take,
and suggests the `dev` preset when that is long and the run kept MLPerf's minimums.
"""

from __future__ import annotations

import sys
from typing import TextIO

from loadgen.engine.runner import Progress
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import IssueMode

__all__ = ["LONG_RUN_S", "ProgressLines", "expected_seconds", "plan_line"]

LONG_RUN_S = 120.0
"""A plan longer than this, at MLPerf's minimums, gets the `dev` preset suggested."""


def expected_seconds(plan: RunPlan) -> float | None:
    """How long the plan should take (warm-up included), or None when the SUT decides."""
    s = plan.settings
    duration = (plan.warmup_ns + plan.min_duration_ns) / 1e9
    if plan.issue_mode is IssueMode.OPEN and s.arrival in ("poisson", "constant", "gamma"):
        return max(duration, plan.warmup_ns / 1e9 + plan.min_query_count / s.target_qps)
    if plan.issue_mode is IssueMode.OFFLINE:
        return duration
    return None


def _clock(seconds: float) -> str:
    """H:MM:SS, or M:SS under an hour."""
    hours, rest = divmod(max(round(seconds), 0), 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


def plan_line(plan: RunPlan) -> str:
    """One line: the scenario, the minimums, the expected duration and what governs it."""
    s = plan.settings
    needs = f"at least {plan.min_query_count} queries and {plan.min_duration_ns / 1e9:g} s"
    if plan.issue_mode is IssueMode.OFFLINE:
        needs = (f"one query of {plan.offline_sample_count} samples, at least "
                 f"{plan.min_duration_ns / 1e9:g} s")
    elif plan.issue_mode is IssueMode.ACCURACY:
        needs = f"every one of {plan.library.total} samples once"
    rate = f" at {s.target_qps:g} QPS" if plan.issue_mode is IssueMode.OPEN else ""
    line = f"plan: {s.scenario}{rate}, {needs}"
    expected = expected_seconds(plan)
    if expected is not None:
        by_queries = (plan.issue_mode is IssueMode.OPEN
                      and plan.min_query_count / s.target_qps > plan.min_duration_ns / 1e9)
        line += f": about {_clock(expected)}" + (" (the query count governs)" if by_queries else "")
        if expected > LONG_RUN_S and s.compliant:
            line += "; for a quick look, --set preset=dev (5 s, 100 queries, not compliant)"
    return line


class ProgressLines:
    """Prints the plan, then a line per progress report: percent, ETA, counts, rate."""

    def __init__(self, plan: RunPlan, out: TextIO | None = None) -> None:
        self.plan = plan
        self.out = out
        self._warmup_s = plan.warmup_ns / 1e9
        self._min_s = plan.min_duration_ns / 1e9

    def announce(self) -> None:
        """The plan line, before the first query."""
        print(plan_line(self.plan), file=self.out or sys.stderr, flush=True)

    def fraction_and_eta(self, p: Progress) -> tuple[float, float | None]:
        """How far the run is toward both minimums (0..1), and the seconds left (None when
        nothing yet tells the rate)."""
        elapsed = p.elapsed_ns / 1e9
        measured_s = max(elapsed - self._warmup_s, 0.0)
        time_frac = measured_s / self._min_s if self._min_s else 1.0
        time_left = max(self._min_s - measured_s, 0.0) + max(self._warmup_s - elapsed, 0.0)
        if self.plan.issue_mode is IssueMode.OFFLINE:
            return min(time_frac, 1.0), time_left
        need = self.plan.min_query_count or 1
        if self.plan.issue_mode is IssueMode.ACCURACY:
            need = -(-self.plan.library.total // self.plan.samples_per_query)
        query_frac = p.issued / need
        rate = p.issued / elapsed if elapsed > 0 else 0.0
        queries_left = max(need - p.issued, 0) / rate if rate else None
        eta = None if queries_left is None else max(time_left, queries_left)
        if self.plan.issue_mode is IssueMode.ACCURACY:
            return min(query_frac, 1.0), queries_left
        return min(time_frac, query_frac, 1.0), eta

    def __call__(self, p: Progress) -> None:
        fraction, eta = self.fraction_and_eta(p)
        rate = p.finished / (p.elapsed_ns / 1e9) if p.elapsed_ns else 0.0
        left = "ETA ?" if eta is None else f"ETA {_clock(eta)}"
        print(f"[{p.elapsed_ns / 1e9:7.1f}s] {100 * fraction:5.1f}%  {left}  issued {p.issued}  "
              f"done {p.finished}  in flight {p.in_flight}  errors {p.errors}  ({rate:.0f}/s)",
              file=self.out or sys.stderr, flush=True)
