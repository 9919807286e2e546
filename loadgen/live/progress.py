"""Progress on long runs: the plan before the first query, then where the run stands.

A run ends once both minimums are met (measured duration and measured queries), so
its progress is the lesser of the two fractions, and its ETA the longer of the two
remainders: the time still to run, and the queries still to issue at the rate seen
so far. Before the first query one line states the plan and how long it should take,
and suggests the `dev` preset when that is long and the run kept MLPerf's minimums.

`Standing` holds the figures of one progress report; `ProgressLines` prints them as a
plain line every `PLAIN_EVERY_S` (pipes, CI logs); `loadgen.live.display` draws the same
figures live on a terminal.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Self, TextIO

from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import IssueMode
from loadgen.plan.units import format_duration
from loadgen.record.progress import Progress

__all__ = ["LONG_RUN_S", "PLAIN_EVERY_S", "ProgressLines", "Standing", "clock",
           "milliseconds", "plan_line", "standing"]

LONG_RUN_S = 120.0
"""A plan longer than this, at MLPerf's minimums, gets the `dev` preset suggested."""
PLAIN_EVERY_S = 2.0
"""Plain progress lines come this often (progress reports come more often)."""


def clock(seconds: float) -> str:
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
    expected = plan.expected_s
    if expected is not None:
        by_queries = (plan.issue_mode is IssueMode.OPEN
                      and plan.min_query_count / s.target_qps > plan.min_duration_ns / 1e9)
        line += f": about {clock(expected)}" + (" (the query count governs)" if by_queries else "")
        if expected > LONG_RUN_S and s.compliant:
            line += "; for a quick look, --set preset=dev (5 s, 100 queries, not compliant)"
    return line


def milliseconds(ns: int | None) -> str:
    """'1.23 ms', '845 us', '1.41 s' (the one duration formatter), or '?' when unknown."""
    return "?" if ns is None else format_duration(ns)


@dataclass(frozen=True, slots=True)
class Standing:
    """Where a run stands at one progress report."""

    progress: Progress
    fraction: float  # toward both minimums, 0..1
    eta_s: float | None  # None while nothing tells the rate
    rate_qps: float  # queries finished per second so far

    @property
    def eta(self) -> str:
        """'ETA 1:05' or 'ETA ?'."""
        return "ETA ?" if self.eta_s is None else f"ETA {clock(self.eta_s)}"


def standing(plan: RunPlan, p: Progress) -> Standing:
    """The percent toward both minimums, the ETA and the rate of one progress report."""
    warmup_s, min_s = plan.warmup_ns / 1e9, plan.min_duration_ns / 1e9
    elapsed = p.elapsed_ns / 1e9
    rate = p.finished / elapsed if elapsed > 0 else 0.0
    measured_s = max(elapsed - warmup_s, 0.0)
    time_frac = measured_s / min_s if min_s else 1.0
    time_left = max(min_s - measured_s, 0.0) + max(warmup_s - elapsed, 0.0)
    if plan.issue_mode is IssueMode.OFFLINE:
        return Standing(p, min(time_frac, 1.0), time_left, rate)
    need = plan.min_query_count or 1
    if plan.issue_mode is IssueMode.ACCURACY:
        need = -(-plan.library.total // plan.samples_per_query)
    query_frac = p.issued / need
    issue_rate = p.issued / elapsed if elapsed > 0 else 0.0
    queries_left = max(need - p.issued, 0) / issue_rate if issue_rate else None
    if plan.issue_mode is IssueMode.ACCURACY:
        return Standing(p, min(query_frac, 1.0), queries_left, rate)
    eta = None if queries_left is None else max(time_left, queries_left)
    return Standing(p, min(time_frac, query_frac, 1.0), eta, rate)


class ProgressLines:
    """Prints the plan, then a plain line every `PLAIN_EVERY_S`: percent, ETA, counts, rate,
    running p50/p99 against the SLO, issue lag."""

    def __init__(self, plan: RunPlan, out: TextIO | None = None) -> None:
        self.plan = plan
        self.out = out
        self._next_s = PLAIN_EVERY_S

    def announce(self) -> None:
        """The plan line, before the first query."""
        print(plan_line(self.plan), file=self.out or sys.stderr, flush=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def fraction_and_eta(self, p: Progress) -> tuple[float, float | None]:
        """How far the run is toward both minimums (0..1), and the seconds left (None when
        nothing yet tells the rate)."""
        s = standing(self.plan, p)
        return s.fraction, s.eta_s

    def line(self, p: Progress) -> str:
        """One plain progress line."""
        s = standing(self.plan, p)
        text = (f"[{p.elapsed_ns / 1e9:7.1f}s] {100 * s.fraction:5.1f}%  {s.eta}  "
                f"issued {p.issued}  done {p.finished}  in flight {p.in_flight}  "
                f"errors {p.errors}  ({s.rate_qps:.0f}/s)")
        g = p.glance
        if g is not None and g.p99_ns is not None:
            text += f"  p50 {milliseconds(g.p50_ns)}  p99 {milliseconds(g.p99_ns)}"
            text += f" (SLO {milliseconds(self.plan.slo_ns)})" if self.plan.slo_ns else ""
        if g is not None and g.issue_lag_p99_ns is not None:
            text += f"  lag p99 {milliseconds(g.issue_lag_p99_ns)}"
        return text

    def __call__(self, p: Progress) -> None:
        if p.elapsed_ns / 1e9 < self._next_s:
            return
        self._next_s = (p.elapsed_ns / 1e9 // PLAIN_EVERY_S + 1) * PLAIN_EVERY_S
        print(self.line(p), file=self.out or sys.stderr, flush=True)
