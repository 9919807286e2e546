"""find-peak: the highest Server QPS whose run is VALID (latency SLO under early stopping).

Or, with `goal = "attainment"` (a token run), the highest rate whose SLO attainment
(requests meeting every goodput SLO, errors counted as misses) stays at or above
`min_attainment` with 99% confidence: early stopping at percentile
100 * min_attainment over the misses (`goodput_probe_passes`). A token-mode run's
VALID verdict is the default goal; its headroom is the larger of p99 TTFT and p99 TPOT
over their bounds.

The search is a pure function of the probes so far (`next_step`):

1. Bracket: start at `start_qps`; multiply by `growth` while every probe passes,
   divide while every probe fails, until a passing rate lies below a failing one.
2. Narrow: estimate the peak by interpolating the SLO headroom (SLO / latency at
   the SLO percentile, about linear in the rate for a queue: exact for M/M/1) to 1,
   and probe just below the estimate (by tolerance/2), or just above it once the low
   end is already there, so that a good estimate closes the bracket in two probes;
   kept inside the middle 80% of the bracket. Bisect instead when the two ends'
   headrooms do not straddle 1 (a failure for errors, say) or when the last two
   probes fell inside the bracket of their time and went the same way (the estimate
   is biased). Stop narrowing when
   (high - low) / high <= tolerance.
3. Repeat: probe each end again until each has `repeats` trials. A rate with any
   failing trial fails (never best-of-N), so a failed repeat at the low end moves
   the bracket down and narrowing resumes.

A probe INVALID for issue lag measured the harness, not the SUT (its latency counts
from the schedule the harness missed), so it is not a verdict on the SUT: the rate is
tried again, and only once it has `harness_retries` such probes do they count (as
failures: at that rate the harness cannot measure the SUT), flagged `harness_high`
when the rate ends up as the bracket's top. When that happens before any rate has
passed, the search steps down as after any failure (a lower rate is easier on the
harness too); it stops at `min_qps` (`harness_limited`).
A probe whose latency at the SLO percentile misses the SLO by more than `FAR_MISS` times
its p99 issue lag is the SUT's failure, lag or not: the lag cannot account for the miss
(p99 8.9 s against a 100 ms SLO with 25 ms of lag is an overloaded SUT).

Bracket: [highest rate whose every trial passed, lowest rate with a failing trial].
Confidence: call the peak the rate at which a probe passes half the time. A rate
above it passes all n trials with probability below 0.5**n, and a rate below it
fails m trials with probability below 0.5**m, so the bracket holds the peak with
probability at least 1 - 0.5**n_low - 0.5**m_high (union bound); `confidence` is that.

Each probe runs at least `min_queries` queries, so a low rate is not failed for
too few queries; trial k at a rate shifts the schedule seed by k. The search stops
early when the next probe would overrun `budget_s`, or after `max_probes`.

Layout, resumable: DIR/journal.jsonl (a header line, then one line per finished
probe), DIR/probes/NNN-RATEqps/ (each probe's run directory), DIR/peak.json and
DIR/probes.csv. Re-running with the same settings, SUT, min_queries and engine
(where the load workers run, as the launch cache keys it) replays the journal (and any probe directory whose launch.json matches) and runs only what is
missing; the other knobs (tolerance, repeats, budget...) may change between runs, as
the next step depends on the probes alone: a tighter tolerance narrows on from there.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.campaigns.launch import SEED_MOD, Launcher, engine_stamp, launch, run_cached, vary
from loadgen.errors import ResultError, SettingsError
from loadgen.judge import early_stopping
from loadgen.judge.verdict import ReasonCode
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import IssueMode, TestSettings, issue_mode
from loadgen.report.peakdoc import PeakDocument, PeakGoal, PeakSlo, Probe, TokenProbe
from loadgen.report.result import RunResult
from loadgen.report.rows import run_row

__all__ = ["FAR_MISS", "GOALS", "Bracket", "SearchConfig", "Step", "Trial", "bracket",
           "confidence", "find_peak", "goodput_probe_passes", "harness_limited", "next_step",
           "probe_record", "round_rate"]

GOALS = ("valid", "attainment")

_CLAMP = 0.1  # an interpolated rate keeps this fraction of the bracket on each side
FAR_MISS = 10
"""A miss of the SLO larger than this many p99 issue lags is the SUT's, not the harness's."""


@dataclass(frozen=True, slots=True)
class SearchConfig:
    """How find-peak searches; rates in QPS."""

    start_qps: float
    min_qps: float = 1.0
    max_qps: float = 1e7
    growth: float = 2.0
    tolerance: float = 0.02
    repeats: int = 2
    max_probes: int = 40
    min_queries: int = 10_000
    harness_retries: int = 2
    goal: str = "valid"  # or "attainment" (token runs)
    min_attainment: float = 0.99  # goal "attainment": the fraction of good requests

    def problems(self) -> list[str]:
        """What is wrong with these numbers (empty when nothing)."""
        out = []
        if not 0 < self.min_qps <= self.start_qps <= self.max_qps:
            out.append("need 0 < min_qps <= start_qps <= max_qps")
        if self.growth <= 1:
            out.append("growth: must exceed 1")
        if not 0 < self.tolerance < 1:
            out.append("tolerance: must be in (0, 1)")
        if min(self.repeats, self.max_probes, self.harness_retries) < 1 or self.min_queries < 0:
            out.append("repeats, max_probes and harness_retries must be at least 1, "
                       "min_queries not negative")
        if self.goal not in GOALS:
            out.append(f"goal: {self.goal!r} is not one of {', '.join(GOALS)}")
        if not 0 < self.min_attainment < 1:
            out.append("min_attainment: must be in (0, 1)")
        return out


@dataclass(frozen=True, slots=True)
class Trial:
    """One probe's outcome: rate, pass/fail, latency at the SLO percentile / SLO (if known),
    and whether the harness fell behind its schedule (then the outcome says nothing)."""

    qps: float
    passed: bool
    ratio: float | None = None
    harness: bool = False


@dataclass(frozen=True, slots=True)
class Bracket:
    """[low, high]: highest all-pass rate below the lowest rate with a failure."""

    low: float | None
    high: float | None
    low_trials: int = 0
    high_trials: int = 0
    high_failures: int = 0
    low_ratio: float | None = None
    high_ratio: float | None = None
    harness_high: bool = False


@dataclass(frozen=True, slots=True)
class Step:
    """What to do next: probe `next_qps`, or stop (`done`) with `status`."""

    bracket: Bracket
    next_qps: float | None
    done: bool
    status: str


def round_rate(qps: float) -> float:
    """Four significant digits, so a rate read back from JSON compares equal."""
    return float(f"{qps:.4g}")


def bracket(trials: Sequence[Trial], harness_retries: int = 2) -> Bracket:
    """The bracket the trials establish (harness-limited trials as the module says)."""
    by_rate: dict[float, list[Trial]] = {}
    for t in trials:
        by_rate.setdefault(t.qps, []).append(t)
    counted: dict[float, list[Trial]] = {}
    for rate, ts in by_rate.items():
        real = [t for t in ts if not t.harness]
        lagged = [t for t in ts if t.harness]
        if len(lagged) >= harness_retries:
            counted[rate] = real + lagged
        elif real:
            counted[rate] = real
    failing = [r for r, ts in counted.items() if not all(t.passed for t in ts)]
    high = min(failing, default=None)
    passing = [r for r in counted if r not in failing and (high is None or r < high)]
    low = max(passing, default=None)
    low_ts = counted[low] if low is not None else []
    high_ts = counted[high] if high is not None else []
    fails = [t for t in high_ts if not t.passed]
    low_ratios = [t.ratio for t in low_ts if t.ratio is not None]
    high_ratios = [t.ratio for t in fails if t.ratio is not None and not t.harness]
    return Bracket(low, high, len(low_ts), len(high_ts), len(fails),
                   max(low_ratios, default=None), min(high_ratios, default=None),
                   any(t.harness for t in high_ts))


def confidence(b: Bracket) -> float | None:
    """1 - 0.5**(trials at low) - 0.5**(failures at high); None until bracketed."""
    if b.low is None or b.high is None:
        return None
    return max(0.0, 1.0 - 0.5**b.low_trials - 0.5**b.high_failures)


def _narrow(b: Bracket, tolerance: float, bisect: bool) -> float:
    assert b.low is not None and b.high is not None
    width = b.high - b.low
    lowest, highest = b.low + _CLAMP * width, b.high - _CLAMP * width
    if bisect or not (b.low_ratio and b.high_ratio and b.low_ratio <= 1.0 < b.high_ratio):
        return b.low + width / 2
    room_low, room_high = 1 / b.low_ratio, 1 / b.high_ratio
    estimate = b.low + width * (room_low - 1) / (room_low - room_high)
    below = estimate * (1 - tolerance / 2)
    target = below if below > lowest else estimate * (1 + tolerance / 2)
    return min(max(target, lowest), highest)


def _same_way(trials: Sequence[Trial]) -> bool:
    """Whether the last two trials both fell inside the bracket of their time, with the
    same outcome (harness-limited trials left out)."""
    real = [t for t in trials if not t.harness]

    def inside(i: int) -> bool:
        q, before = real[i].qps, real[:i]
        return any(t.passed and t.qps < q for t in before) and any(
            not t.passed and t.qps > q for t in before)

    n = len(real)
    return n >= 2 and inside(n - 1) and inside(n - 2) and real[-1].passed == real[-2].passed


def next_step(trials: Sequence[Trial], cfg: SearchConfig) -> Step:
    """Pure: the trials so far -> the next rate to probe, or done and why."""
    b = bracket(trials, cfg.harness_retries)

    def go(qps: float, status: str) -> Step:
        return Step(b, round_rate(qps), False, status)

    if len(trials) >= cfg.max_probes:
        return Step(b, None, True, "max_probes")
    if b.low is None and b.high is None:
        return go(cfg.start_qps, "bracketing")
    if b.high is None:
        assert b.low is not None
        if b.low >= cfg.max_qps:
            return Step(b, None, True, "ceiling")
        return go(min(b.low * cfg.growth, cfg.max_qps), "bracketing")
    if b.low is None:
        if b.high <= cfg.min_qps:
            return Step(b, None, True, "harness_limited" if b.harness_high else "floor")
        return go(max(b.high / cfg.growth, cfg.min_qps), "bracketing")
    if (b.high - b.low) / b.high > cfg.tolerance:
        nxt = round_rate(_narrow(b, cfg.tolerance, _same_way(trials)))
        if b.low < nxt < b.high:
            return go(nxt, "narrowing")
    if b.low_trials < cfg.repeats:
        return go(b.low, "repeating")
    if b.high_trials < cfg.repeats:
        return go(b.high, "repeating")
    return Step(b, None, True, "converged")


def goodput_probe_passes(result: RunResult, min_attainment: float) -> bool:
    """Whether a token run's attainment is at least `min_attainment` with 99% confidence
    (early stopping at that percentile over the misses); False without token figures."""
    ts = result.stats.token_stats
    if ts is None or result.stats.interrupted:
        return False
    g = ts.goodput
    return early_stopping.passes(g.attempted, g.attempted - g.good, 100.0 * min_attainment)


def _token_ratio(result: RunResult) -> float | None:
    """Token mode: the larger of p99 TTFT and p99 TPOT over their bounds."""
    ts = result.stats.token_stats
    if ts is None or not ts.early_stopping:
        return None
    ratios = [es.p_ns / es.target_ns for es in ts.early_stopping.values() if es.p_ns]
    return max(ratios, default=None)


def harness_limited(result: RunResult) -> bool:
    """Whether a probe measured the harness rather than the SUT: INVALID for issue lag, and
    its latency at the SLO percentile within `FAR_MISS` lags of the SLO (no latency SLO:
    lag alone decides)."""
    r = result.stats
    if ReasonCode.ISSUE_LAG not in result.verdict.codes:
        return False
    slo_ns, at_ns = r.early_stopping.target_latency_ns, r.target_latency_at_ns
    return not (slo_ns and at_ns - slo_ns > FAR_MISS * r.issue_lag_ns.p99)


def probe_record(result: RunResult, index: int, trial: int, run_dir: str,
                 wall_s: float) -> Probe:
    """A probe's line in the journal and peak.json: rate, verdict, figures."""
    s, r = result.settings, result.stats
    at_p, slo_ns = r.target_latency_at_ns, r.early_stopping.target_latency_ns
    ts = r.token_stats
    token = None if ts is None else TokenProbe(ts.goodput, ts.latencies["ttft_ns"].summary.p99,
                                               ts.latencies["tpot_ns"].summary.p99)
    return Probe(
        index=index, target_qps=round_rate(s.target_qps), trial=trial,
        dir=run_dir, valid=result.valid, reasons=tuple(x.text for x in result.verdict.reasons),
        reason_codes=tuple(str(code) for code in result.verdict.codes),
        harness_limited=harness_limited(result),
        slo_ratio=at_p / slo_ns if slo_ns and at_p else _token_ratio(result),
        latency_at_slo_percentile_ns=int(at_p),
        qps_scheduled=r.qps_scheduled, qps_completed=r.qps_completed,
        goodput_qps=r.goodput_qps, queries=r.queries,
        overlatency=r.overlatency, errors=r.errors,
        duration_s=r.duration_s, wall_s=round(wall_s, 3),
        schedule_rng_seed=s.schedule_rng_seed,
        latency_ns=r.query_latency_ns, early_stopping=r.early_stopping,
        row=run_row(result), token=token)


def _trial(probe: Probe) -> Trial:
    return Trial(float(probe.target_qps), probe.outcome, probe.slo_ratio,
                 probe.harness_limited)


def _read_journal(path: Path, header: dict[str, Any]) -> list[Probe]:
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(header) + "\n")
        return []
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not lines or {k: lines[0].get(k) for k in header} != header:
        raise ResultError(f"{path}: written for other settings, SUT, min_queries or engine "
                          "(local processes or Ray); use another output directory")
    return [Probe.from_dict(line) for line in lines[1:]]


def find_peak(settings: TestSettings, spec: str, out_dir: Path, cfg: SearchConfig,
              budget_s: float | None = None, runner: Launcher = launch,
              log: Callable[[str], None] | None = None) -> PeakDocument:
    """Search, write DIR/peak.json and DIR/probes.csv, and return the peak document."""
    from loadgen.report import headline, tables

    problems = cfg.problems()
    if issue_mode(settings) is not IssueMode.OPEN:
        problems.append("find-peak needs scenario Server with open-loop arrivals")
    if problems:
        raise SettingsError(problems)
    began = time.perf_counter()
    header = {"kind": "find-peak-journal", "sut": spec, "min_queries": cfg.min_queries,
              "settings": json.loads(json.dumps(settings.as_dict())),
              "engine": engine_stamp(runner, settings)}
    if cfg.goal != "valid":
        header["goal"] = {"goal": cfg.goal, "min_attainment": cfg.min_attainment}
    journal = out_dir / "journal.jsonl"
    probes = _read_journal(journal, header)
    prior_s = sum(p.wall_s for p in probes)
    while not (step := next_step([_trial(p) for p in probes], cfg)).done:
        qps = step.next_qps
        assert qps is not None
        if budget_s is not None and prior_s + time.perf_counter() - began + _probe_estimate_s(
                settings, cfg, qps, probes) > budget_s:
            step = Step(step.bracket, None, True, "budget")
            break
        probe = _probe(settings, spec, out_dir, cfg, qps, probes, runner)
        with journal.open("a") as f:
            f.write(json.dumps(probe.as_dict()) + "\n")
        probes.append(probe)
        if log:
            outcome = "harness-limited" if probe.harness_limited else (
                "passed" if probe.outcome else "failed")
            ratio = f", p/SLO {probe.slo_ratio:.3f}" if probe.slo_ratio else ""
            log(f"probe {probe.index} ({step.status}): {qps:g} QPS "
                f"trial {probe.trial} {outcome}{ratio}")
    b = step.bracket
    doc = PeakDocument(
        status=step.status, peak_qps=b.low or 0.0, bracket=(b.low, b.high),
        confidence=confidence(b),
        confidence_basis="1 - 0.5**trials_at_low - 0.5**failures_at_high",
        trials_at_low=b.low_trials, failures_at_high=b.high_failures,
        harness_high=b.harness_high,
        slo=PeakSlo(settings.target_latency_percentile, settings.target_latency_ms),
        goal=PeakGoal(cfg.goal, cfg.min_attainment) if cfg.goal != "valid"
        else PeakGoal("valid"),
        scenario=str(settings.scenario), sut=spec,
        sut_description=probes[-1].sut_description if probes else None,
        settings=header["settings"], config=dataclasses.asdict(cfg),
        probes=tuple(replace(p, sut_description=None) for p in probes),
        elapsed_s=round(prior_s + time.perf_counter() - began, 3))
    doc = replace(doc, headline=headline.peak_headline(doc))
    tables.write_json(out_dir / "peak.json", doc.as_dict())
    tables.write_csv(out_dir / "probes.csv", tables.search_rows(doc))
    return doc


def _probe_settings(settings: TestSettings, cfg: SearchConfig, qps: float,
                    probes: Sequence[Probe]) -> TestSettings:
    """Trial k at `qps`: at least min_queries, schedule seed shifted by k."""
    trial = sum(p.target_qps == qps for p in probes)
    return vary(settings, {
        "target_qps": qps,
        "min_query_count": max(settings.min_query_count, cfg.min_queries),
        "schedule_rng_seed": (settings.schedule_rng_seed + trial) % SEED_MOD})


def _probe_estimate_s(settings: TestSettings, cfg: SearchConfig, qps: float,
                      probes: Sequence[Probe]) -> float:
    """How long the next probe should take: its plan's length (the first probe has no
    other guide), or the probes so far, whichever is longer."""
    planned = RunPlan.of(_probe_settings(settings, cfg, qps, probes)).expected_s or 0.0
    mean_wall = sum(p.wall_s for p in probes) / len(probes) if probes else 0.0
    return max(planned, mean_wall)


def _probe(settings: TestSettings, spec: str, out_dir: Path, cfg: SearchConfig, qps: float,
           probes: Sequence[Probe], runner: Launcher) -> Probe:
    """Run (or reuse) trial k at `qps`: at least min_queries, schedule seed shifted by k."""
    trial = sum(p.target_qps == qps for p in probes)
    probe_settings = _probe_settings(settings, cfg, qps, probes)
    run_dir = f"probes/{len(probes):03d}-{qps:g}qps"
    started = time.perf_counter()
    result, reused = run_cached(probe_settings, spec, out_dir / run_dir, runner)
    wall = result.stats.duration_s if reused else time.perf_counter() - started
    probe = probe_record(result, len(probes), trial, run_dir, wall)
    if cfg.goal == "attainment":  # bisect: latency headroom says little about attainment
        probe = replace(probe, passed=goodput_probe_passes(result, cfg.min_attainment),
                        slo_ratio=None)
    return replace(probe, sut_description=result.sut)
