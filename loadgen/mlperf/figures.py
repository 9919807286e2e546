"""The figures LoadGen's logs report, read off our run: latencies, early stopping, validity.

`LogRun` is what the log writers take: the run's result and, where the
drop-in ran it, the token histograms. Percentiles come from the run's HDR
histograms (3 significant digits). LoadGen's validity is ours with its own
early-stopping rule: SingleStream and MultiStream need enough queries for an
estimate (64 at p90, 662 at p99); in token mode TPOT, then TTFT, replace the
query latency (Server: against `tpot_latency` and `ttft_latency`), and the
Server's performance constraint is p99 TTFT and TPOT within their bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.judge import early_stopping
from loadgen.judge.verdict import ReasonCode
from loadgen.record.histograms import decode, percentile_ns, summary_ns
from loadgen.report.result import RunResult

__all__ = ["PERCENTILES", "REPLACED", "EarlyStop", "LogRun", "checks", "early_stop", "estimate", "latencies",
           "query_early_stop", "reasons", "token_early_stops", "valid"]

PERCENTILES = (50.0, 90.0, 95.0, 97.0, 99.0, 99.9)
REPLACED = frozenset({ReasonCode.EARLY_STOPPING, ReasonCode.TTFT_LATENCY, ReasonCode.TPOT_LATENCY,
                      ReasonCode.TTFT_EARLY_STOPPING, ReasonCode.TPOT_EARLY_STOPPING})
"""Our verdict's latency rules, which LoadGen's own parts (`checks`) stand in for."""


@dataclass(slots=True)
class LogRun:
    """What the logs are written from."""

    scenario: str  # LoadGen's name: SingleStream, MultiStream, Server, Offline
    mode: str  # LoadGen's test mode name
    effective: dict[str, Any]
    requested: dict[str, Any] = field(default_factory=dict)
    result: RunResult | None = None  # the performance run; None for AccuracyOnly
    sut_name: str = "PySUT"
    qsl_name: str = "PyQSL"
    total: int = 0
    performance_count: int = 0
    loaded: Sequence[int] = ()
    accuracy: Sequence[Any] = ()  # AccuracyRow-like: seq_id, qsl_idx, data, n_tokens
    token_hists: dict[str, HdrHistogram] | None = None  # TTFT and TPOT, when tokens ran
    token_counters: dict[str, int] = field(default_factory=dict)
    use_tokens: bool = False  # the harness asked for token latencies (accuracy: token counts)
    memo: dict[tuple[Any, ...], Any] = field(default_factory=dict, repr=False)
    """Figures already worked out (early stopping at large n costs milliseconds each)."""
    trace: Sequence[tuple[int, int, int, int, int]] | None = None
    trace_start_ns: int = 0

    @property
    def tokens(self) -> bool:
        """Whether the run judged token latencies (LoadGen's `use_token_latencies`)."""
        return self.token_hists is not None

    @property
    def percent(self) -> float:
        """The scenario's target percentile, in percent."""
        return float(self.effective["target_latency_percentile"]) * 100

    def hist(self, name: str) -> HdrHistogram | None:
        """A latency histogram: ours by result.json name, or a token one (`ttft_ns`, `tpot_ns`)."""
        if self.token_hists is not None and name in self.token_hists:
            return self.token_hists[name]
        assert self.result is not None
        if ("hist", name) not in self.memo:
            blob = self.result.stats.histograms.get(name)
            self.memo[("hist", name)] = decode(blob) if blob else None
        return self.memo[("hist", name)]

    def at(self, name: str, percent: float) -> int:
        """One histogram's value at a percentile (0 when it is empty)."""
        h = self.hist(name)
        return int(percentile_ns(h, percent)) if h is not None and h.total_count else 0


def latencies(run: LogRun, name: str) -> dict[str, int]:
    """min, max, mean and LoadGen's six percentiles ("50.00", ...) of one histogram."""
    h = run.hist(name)
    base = summary_ns(h) if h is not None and h.total_count else {}
    out = {k: int(base.get(k, 0)) for k in ("min", "max", "mean")}
    return out | {f"{p:.2f}": run.at(name, p) for p in PERCENTILES}


@dataclass(frozen=True, slots=True)
class EarlyStop:
    """LoadGen's early-stopping outcome on one latency: passed, its lines, its estimate."""

    ok: bool
    lines: tuple[str, ...]
    estimate: int = 0


def _estimate(run: LogRun, name: str, n: int, percent: float) -> EarlyStop:
    least = early_stopping.min_queries(percent, 1)
    rank = early_stopping.estimate_rank(n, percent) if n else None
    if rank is None:
        return EarlyStop(False, (f" * Only processed {n} queries.",
                                 (f" * Need to process at least {least} queries for early "
                                 "stopping.")))
    value = run.at(name, 100.0 * rank / n)
    return EarlyStop(True, (f" * Processed at least {least} queries ({n}).",
                            f" * Would discard {n - rank} highest latency queries.",
                            f" * Early stopping {percent:.1f}th percentile estimate: {value}"),
                     value)


def estimate(run: LogRun, name: str, percent: float) -> int:
    """The early-stopping percentile estimate on histogram `name`; 0 when too few queries."""
    assert run.result is not None
    key = ("estimate", name, percent)
    if key not in run.memo:
        run.memo[key] = _estimate(run, name, run.result.stats.queries, percent).estimate
    return run.memo[key]  # type: ignore[no-any-return]


def early_stop(run: LogRun, name: str, target_ns: int = 0, overlatency: int = 0) -> EarlyStop:
    """LoadGen's early stopping on histogram `name` (Server: against `target_ns`)."""
    key = ("early_stop", name, target_ns, overlatency)
    if key not in run.memo:
        run.memo[key] = _early_stop(run, name, overlatency)
    return run.memo[key]  # type: ignore[no-any-return]


def _early_stop(run: LogRun, name: str, overlatency: int) -> EarlyStop:
    assert run.result is not None
    n = run.result.stats.queries
    if run.scenario == "Offline":
        return EarlyStop(True, ())
    if run.scenario == "Server":
        needed = early_stopping.min_queries(run.percent, overlatency)
        if n >= needed:
            return EarlyStop(True, (" * Run successful.",))
        return EarlyStop(False, (" * Run unsuccessful.", f" * Processed {n} queries.",
                                 f" * Would need to run at least {needed - n} more queries,",
                                 " with the run being successful if every additional",
                                 " query were under latency."))
    main = _estimate(run, name, n, run.percent)
    if run.scenario != "SingleStream" or not main.ok:
        return main
    extra = _estimate(run, name, n, 99.0)
    tail = (extra.lines[-1],) if extra.ok else (
        " * Not enough queries processed for 99.0th percentile",
        " early stopping estimate (would need to process at",
        f" least {early_stopping.min_queries(99.0, 1)} total queries).")
    return EarlyStop(True, main.lines + tail, main.estimate)


def token_early_stops(run: LogRun) -> tuple[EarlyStop, EarlyStop]:
    """(TTFT, TPOT): LoadGen judges TPOT first and TTFT only when TPOT passed."""
    c = run.token_counters
    tpot = early_stop(run, "tpot_ns", run.effective["tpot_latency"], c.get("tpot_over", 0))
    ttft = early_stop(run, "ttft_ns", run.effective["ttft_latency"], c.get("ttft_over", 0)) \
        if tpot.ok else EarlyStop(False, ())
    return ttft, tpot


def query_early_stop(run: LogRun) -> EarlyStop:
    """LoadGen's early stopping on query latency (not in token mode)."""
    assert run.result is not None
    return early_stop(run, "query_latency_ns", run.effective["target_latency_ns"],
                      run.result.stats.overlatency)


def checks(run: LogRun) -> dict[str, bool]:
    """LoadGen's validity parts: min duration, min queries, perf constraints, early stopping."""
    if ("checks",) not in run.memo:
        run.memo[("checks",)] = _checks(run)
    return run.memo[("checks",)]  # type: ignore[no-any-return]


def _checks(run: LogRun) -> dict[str, bool]:
    assert run.result is not None
    codes = set(run.result.verdict.codes)
    e = run.effective
    if run.tokens:
        ttft, tpot = token_early_stops(run)
        stopped = ttft.ok and tpot.ok
        constrained = run.scenario != "Server" or (
            run.at("ttft_ns", run.percent) <= e["ttft_latency"]
            and run.at("tpot_ns", run.percent) <= e["tpot_latency"])
    else:
        stopped = query_early_stop(run).ok
        constrained = run.scenario != "Server" or \
            run.at("latency_ns", run.percent) <= e["target_latency_ns"]
    return {"min_duration": ReasonCode.MIN_DURATION not in codes,
            "min_queries": not codes & {ReasonCode.MIN_QUERIES, ReasonCode.MIN_SAMPLES},
            "perf_constraints": constrained, "early_stopping": stopped}


def valid(run: LogRun) -> bool:
    """LoadGen's verdict: our other rules (errors, issue lag, ...) and LoadGen's four parts."""
    assert run.result is not None
    others = set(run.result.verdict.codes) - REPLACED
    return not others and all(checks(run).values())


def reasons(run: LogRun) -> list[str]:
    """Why the run is INVALID, one text each."""
    assert run.result is not None
    out = [r.text for r in run.result.verdict.reasons if r.code not in REPLACED]
    c = checks(run)
    if not c["perf_constraints"]:
        out.append("Reduce target QPS to improve latency.")
    if not c["early_stopping"]:
        out.append("early stopping: too few queries, or too many over the latency bound")
    return out
