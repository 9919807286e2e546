"""VALID or INVALID, with every reason; warnings for the usual pitfalls.

Pure: (plan, stats) -> Verdict. Each rule is one small function returning a
`Reason` (a stable code for programs, prose with what to do for people) or
None. Code reads `Verdict.codes`; nobody parses the prose.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass

from loadgen.judge.adjusted import percentile_key
from loadgen.judge.stats import RunStats
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import IssueMode, Scenario
from loadgen.record.hostload import HostLoad

__all__ = ["RULES", "Headline", "Reason", "ReasonCode", "Verdict", "evaluate", "headline",
           "token_latencies"]

ISSUER_QPS = 20_000
"""A rate one load process issues on time on a quiet core; above it, advise more processes."""


class ReasonCode(enum.StrEnum):
    """Why a run is INVALID; one code per rule, stable across releases."""

    INTERRUPTED = "interrupted"
    MIN_DURATION = "min_duration"
    MIN_QUERIES = "min_queries"
    MIN_SAMPLES = "min_samples"
    ERRORS = "errors"
    EARLY_STOPPING = "early_stopping"
    ISSUE_LAG = "issue_lag"
    ACCURACY = "accuracy"
    TTFT_LATENCY = "ttft_latency"
    TPOT_LATENCY = "tpot_latency"
    TTFT_EARLY_STOPPING = "ttft_early_stopping"
    TPOT_EARLY_STOPPING = "tpot_early_stopping"
    CLOCK_SKEW = "clock_skew"  # several workers: their start skew bound is too wide
    START_LATE = "start_late"  # several workers: one was released after its first query
    WORKER_LOST = "worker_lost"  # several workers: one was lost mid-run
    NOTHING_MEASURED = "nothing_measured"  # no query completed in the measured window
    ERROR_ADJUSTED = "error_adjusted"  # judge_error_adjusted: the tail with failures counted
    CACHE_HIT_RATE = "cache_hit_rate"  # prefix_cache_hit_rate: the server's hits off target
    JOB_DEADLINE = "job_deadline"  # job_deadline_ms: too many jobs over it, failed or unfinished


@dataclass(frozen=True, slots=True)
class Reason:
    """One reason a run is INVALID."""

    code: ReasonCode
    text: str


@dataclass(frozen=True, slots=True)
class Verdict:
    """The judgement of one run."""

    valid: bool
    reasons: tuple[Reason, ...]
    warnings: tuple[str, ...]

    @property
    def codes(self) -> tuple[ReasonCode, ...]:
        """The reasons' codes, in rule order."""
        return tuple(r.code for r in self.reasons)


@dataclass(frozen=True, slots=True)
class Headline:
    """The scenario's headline metric."""

    name: str
    value: float


Rule = Callable[[RunPlan, RunStats], "Reason | None"]


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"


def not_interrupted(p: RunPlan, r: RunStats) -> Reason | None:
    if r.interrupted:
        return Reason(ReasonCode.INTERRUPTED, "the run was interrupted before it finished: "
                                              "its figures are partial; run it to the end")
    return None


def something_measured(p: RunPlan, r: RunStats) -> Reason | None:
    if r.queries or r.samples:
        return None
    if r.errors:
        why = f"{r.errors} queries failed (see the errors)"
    elif p.warmup_ns:
        why = (f"every query was issued in the warm-up (warmup_s = {p.warmup_ns / 1e9:g} s): "
               "run longer than the warm-up, or shorten it")
    else:
        why = "the SUT answered none in time"
    return Reason(ReasonCode.NOTHING_MEASURED,
                  f"nothing was measured: no query completed in the measured window; {why}")


def min_duration(p: RunPlan, r: RunStats) -> Reason | None:
    if p.issue_mode is IssueMode.ACCURACY:  # every sample once, however long that takes
        return None
    if r.duration_s * 1e9 + 1 < p.min_duration_ns:
        return Reason(ReasonCode.MIN_DURATION,
                      f"measured duration {r.duration_s:.2f} s is below min_duration_s "
                      f"{p.min_duration_ns / 1e9:g} s: run longer")
    return None


def min_queries(p: RunPlan, r: RunStats) -> Reason | None:
    if p.issue_mode is IssueMode.ACCURACY:
        return None
    if p.issue_mode is IssueMode.OFFLINE:
        if r.samples < p.offline_sample_count:
            return Reason(ReasonCode.MIN_SAMPLES,
                          f"{r.samples} samples completed, Offline needs "
                          f"{p.offline_sample_count}: lower target_qps or fix the errors")
        return None
    if r.queries < p.min_query_count:
        return Reason(ReasonCode.MIN_QUERIES, f"{r.queries} queries completed, below "
                                              f"min_query_count {p.min_query_count}: run "
                                              "longer (min_duration_s), or fix the errors")
    return None


def no_errors(p: RunPlan, r: RunStats) -> Reason | None:
    if r.errors or r.unfinished:
        kinds = ", ".join(f"{k}={v}" for k, v in sorted(r.errors_by_kind.items()))
        failed = f"{r.errors} queries failed ({kinds})" if r.errors else \
            f"{r.unfinished} queries were left unfinished"
        first = next((f"; first {kind}: {d.messages[0]}" for kind, d in r.errors_detail.items()
                      if d.messages), "")
        return Reason(ReasonCode.ERRORS, f"{failed}: a valid run has none{first} (every "
                                         "kind's count and messages: errors_detail)")
    return None


def latency_slo(p: RunPlan, r: RunStats) -> Reason | None:
    es = r.early_stopping
    server = p.settings.scenario is Scenario.SERVER
    if p.settings.use_token_latencies and not p.slo_ns:  # judged by `token_latencies`
        return None
    if es.passes is None or not server or p.issue_mode is IssueMode.ACCURACY or es.passes:
        return None
    return Reason(ReasonCode.EARLY_STOPPING,
                  f"{es.overlatency} of {es.queries} queries over "
                  f"{_ms(es.target_latency_ns or 0)}: early stopping at "
                  f"p{es.percentile:g} with 99% confidence allows "
                  f"{max(es.max_overlatency_allowed or 0, 0)}; needs at least "
                  f"{es.min_queries_needed} queries for that count, or a lower target_qps")


def error_adjusted_tail(p: RunPlan, r: RunStats) -> Reason | None:
    """With `judge_error_adjusted`: the SLO's percentile counting failed and unfinished
    queries as infinitely slow (or at their timeout) must meet each latency bound."""
    s = p.settings
    if not s.judge_error_adjusted or p.issue_mode is IssueMode.ACCURACY:
        return None
    key = percentile_key(s.target_latency_percentile)
    bounds: list[tuple[str, int, dict[str, int | None] | None]] = []
    if p.slo_ns:
        bounds.append(("latency", p.slo_ns, r.query_latency_ns.error_adjusted))
    ts = r.token_stats
    if ts is not None:
        targets = p.token_targets
        bounds += [(name, bound, ts.latencies[f"{name.lower()}_ns"].error_adjusted)
                   for name, bound in (("TTFT", targets.ttft_ns), ("TPOT", targets.tpot_ns))
                   if bound]
    for name, bound, adjusted in bounds:
        value = (adjusted or {}).get(key, 0)
        if value is None or value > bound:
            shown = "infinite" if value is None else _ms(value)
            return Reason(ReasonCode.ERROR_ADJUSTED,
                          f"error-adjusted {key} {name} {shown} exceeds {_ms(bound)}: "
                          f"{r.errors} failed and {r.unfinished} unfinished queries count "
                          "as infinitely slow (or at their timeout); fix the failures")
    return None


def issue_lag(p: RunPlan, r: RunStats) -> Reason | None:
    """Open-loop arrivals only (a closed loop or Offline has no schedule to fall behind)."""
    return issue_lag_on(p, r, None) if _lagging(p, r) else None


def _lagging(p: RunPlan, r: RunStats) -> bool:
    return p.issue_mode is IssueMode.OPEN and r.issue_lag_ns.p99 > p.max_issue_lag_ns


def issue_lag_on(p: RunPlan, r: RunStats, host: HostLoad | None) -> Reason:
    """The issue-lag reason, with advice that fits the run: the host's own load when it was
    busy, more load processes only at a rate one process cannot issue, and a single issuer's
    core shared with an in-process SUT on a small host."""
    s = p.settings
    text = (f"p99 issue lag {_ms(r.issue_lag_ns.p99)} exceeds max_issue_lag_ms "
            f"{s.max_issue_lag_ms:g}: the load generator fell behind its schedule, so this "
            "measures the harness, not the SUT")
    cores = host.cores if host is not None else 0
    per_process = s.target_qps / max(1, s.workers)
    advice = []
    if host is not None and host.busy:
        text += f"; the host was busy ({host.phrase()})"
        advice.append("rerun on a quieter host, or stop what else runs here")
    if per_process > ISSUER_QPS:
        advice.append(f"spread {per_process:.0f} QPS per load process over more "
                      f"(--workers {math.ceil(s.target_qps / ISSUER_QPS)})")
    elif cores and cores <= 2:
        advice.append(f"on {cores} core{'s' if cores != 1 else ''} the issuer shares its CPU "
                      "with the SUT and all else: run the SUT on another host, or give it "
                      "fewer workers")
    if not advice:
        advice.append("check what else runs on this host (see environment.host_load)")
    return Reason(ReasonCode.ISSUE_LAG, f"{text}; {'; '.join(advice)}")


def accuracy(p: RunPlan, r: RunStats) -> Reason | None:
    if p.issue_mode is not IssueMode.ACCURACY:
        return None
    target = p.settings.accuracy_target
    if r.accuracy is None or r.accuracy.value is None:
        return Reason(ReasonCode.ACCURACY, "accuracy mode: the SUT cannot score its outputs; "
                                           "use one with a score() (builtin: models can)")
    if r.accuracy.value < target:
        return Reason(ReasonCode.ACCURACY, f"accuracy {r.accuracy.value:.4f} is below "
                                           f"accuracy_target {target:g}: check the model, "
                                           "its weights and its precision")
    return None


_TOKEN_CODES = {"ttft": (ReasonCode.TTFT_LATENCY, ReasonCode.TTFT_EARLY_STOPPING),
                "tpot": (ReasonCode.TPOT_LATENCY, ReasonCode.TPOT_EARLY_STOPPING)}
_TOKEN_HINTS = {"ttft": "lower target_qps, or give the server more prefill capacity",
                "tpot": "lower target_qps, or cap the server's batch (max sequences in flight)"}


def token_latencies(p: RunPlan, r: RunStats) -> tuple[Reason, ...]:
    """MLPerf token mode (Server): p99 TTFT and p99 TPOT within their bounds, and early
    stopping passing on each; one reason per miss."""
    ts = r.token_stats
    if (not p.settings.use_token_latencies or p.settings.scenario is not Scenario.SERVER
            or p.issue_mode is IssueMode.ACCURACY):
        return ()
    if ts is None:
        return (Reason(ReasonCode.TTFT_LATENCY, "use_token_latencies: the SUT streamed no "
                                                "tokens; use a streaming SUT (openai://, "
                                                "generate://, llmsim:) with a token workload"),)
    out = []
    for metric, es in ts.early_stopping.items():
        over, stopping = _TOKEN_CODES[metric]
        name, hint = metric.upper(), _TOKEN_HINTS[metric]
        if es.p_ns > es.target_ns:
            out.append(Reason(over, f"p{es.percentile:g} {name} {_ms(es.p_ns)} exceeds "
                                    f"{metric}_latency_ms {es.target_ns / 1e6:g}: {hint}"))
        elif not es.passes:
            out.append(Reason(stopping, f"{es.overlatency} of {es.requests} requests had {name} "
                                        f"over {_ms(es.target_ns)}: early stopping at "
                                        f"p{es.percentile:g} with 99% confidence allows "
                                        f"{max(es.max_overlatency_allowed, 0)}; needs at least "
                                        f"{es.min_queries_needed} requests for that count "
                                        f"(run longer), or {hint}"))
    return tuple(out)


def cache_hit_rate(p: RunPlan, r: RunStats) -> Reason | None:
    """A prefix-cache experiment: the server's achieved hit rate (its per-request
    `cached_tokens` over the prompt tokens) within `prefix_cache_tolerance` of the target."""
    s = p.settings
    if not s.prefix_cache_hit_rate or p.issue_mode is IssueMode.ACCURACY:
        return None
    ts = r.token_stats
    achieved = None if ts is None else ts.tokens.cache["hit_rate"]["achieved"]
    if achieved is None:
        return Reason(ReasonCode.CACHE_HIT_RATE, "prefix_cache_hit_rate: the server reported no "
                                                 "usage.prompt_tokens_details.cached_tokens; use "
                                                 "a server that does (vLLM, loadgen serve)")
    if abs(achieved - s.prefix_cache_hit_rate) > s.prefix_cache_tolerance:
        return Reason(ReasonCode.CACHE_HIT_RATE,
                      f"prefix cache hit rate {achieved:.3f} is more than "
                      f"{s.prefix_cache_tolerance:g} from prefix_cache_hit_rate "
                      f"{s.prefix_cache_hit_rate:g}: prime the cache (warmup_s), give it room "
                      "for prefix_groups prefixes, or check that the server caches prefixes")
    return None


def job_deadline(p: RunPlan, r: RunStats) -> Reason | None:
    """Agentic jobs with `job_deadline_ms`: the jobs over it (failed and unfinished ones
    included) few enough for early stopping at the SLO's percentile, as requests are."""
    js = r.job_stats
    if js is None or js.early_stopping is None or js.passes:
        return None
    es = js.early_stopping
    allowed = es["max_missed_allowed"]
    bound = (f"allows {allowed}" if allowed >= 0 else "allows none: too few jobs")
    return Reason(ReasonCode.JOB_DEADLINE,
                  f"{es['missed']} of {es['jobs']} jobs missed job_deadline_ms "
                  f"{js.deadline_ms:g} ({js.failed} failed, {js.unfinished} unfinished): early "
                  f"stopping at p{es['percentile']:g} with 99% confidence {bound}; needs at "
                  f"least {es['min_jobs_needed']} jobs for that count (run longer: "
                  "min_query_count counts jobs), a lower target_qps, or a later deadline")


RULES: tuple[Rule, ...] = (not_interrupted, something_measured, min_duration, min_queries,
                           no_errors, latency_slo, error_adjusted_tail, issue_lag, accuracy,
                           cache_hit_rate, job_deadline)


def _warnings(p: RunPlan, r: RunStats) -> list[str]:
    s = p.settings
    out = []
    if not s.compliant:
        out.append(f"preset {s.preset!r}: settings below MLPerf minimums, not a compliant "
                   "result; drop the preset for one")
    if s.warmup_s and p.issue_mode is IssueMode.OFFLINE:
        out.append(f"warmup_s = {s.warmup_s:g} ignored: Offline has no warm-up (as in MLPerf), "
                   "its one query is the measurement")
    if s.warmup_s == 0 and p.issue_mode in (IssueMode.OPEN, IssueMode.CLOSED):
        out.append("no warm-up (warmup_s = 0): cold-start effects are inside the measurement; "
                   "set warmup_s (a few seconds) to leave them out")
    tail = r.queries * (1 - s.target_latency_percentile / 100)
    if s.scenario is not Scenario.OFFLINE and r.queries and tail < 100:
        out.append(f"only {tail:.0f} samples beyond p{s.target_latency_percentile:g}: the "
                   "percentile is poorly resolved; run at least "
                   f"{int(100 / (1 - s.target_latency_percentile / 100))} queries")
    lat = r.query_latency_ns
    if lat.p50 and lat.mean > 2 * lat.p50:
        out.append(f"mean latency {_ms(lat.mean)} is over twice the median {_ms(lat.p50)}: "
                   "a heavy tail or stalls; read the percentiles, not the mean")
    if s.scenario is Scenario.SERVER and p.issue_mode is IssueMode.CLOSED:
        out.append("closed-loop arrivals labelled as Server: the offered load adapts to the SUT, "
                   "so latency is understated (coordinated omission); use poisson")
    if r.out_of_range:
        out.append(f"{r.out_of_range} values outside the histogram range (1 ns to 1 h) were not "
                   "recorded: a latency over an hour is a stuck query; set query_timeout_ms")
    if r.late:
        out.append(f"{r.late} completions arrived after their query had already timed out: "
                   "raise query_timeout_ms if the SUT is only slow")
    ts = r.token_stats
    if ts is not None and s.fixed_output and ts.tokens.finish_other:
        out.append(f"{ts.tokens.finish_other} answers ended for another reason than `length` "
                   "although a fixed output length was asked for: the server ignores "
                   "ignore_eos/min_tokens, so output lengths vary; check its options")
    return out


def evaluate(p: RunPlan, r: RunStats, extra_warnings: tuple[str, ...] = (),
             extra_reasons: tuple[Reason, ...] = (), host: HostLoad | None = None) -> Verdict:
    """Apply every rule; any reason (or extra one, found outside the stats) makes it INVALID.
    `host` (the host's load over the run) lets the issue-lag reason say when it was busy."""
    reasons = tuple(reason for rule in RULES if (reason := rule(p, r)) is not None)
    reasons = tuple(issue_lag_on(p, r, host) if x.code is ReasonCode.ISSUE_LAG else x
                    for x in reasons)
    reasons += token_latencies(p, r)
    reasons += extra_reasons
    return Verdict(not reasons, reasons, extra_warnings + tuple(_warnings(p, r)))


def headline(p: RunPlan, r: RunStats) -> Headline:
    """The scenario's headline metric."""
    scenario = p.settings.scenario
    if scenario is Scenario.SERVER:
        return Headline("scheduled_qps", r.qps_scheduled)
    if scenario is Scenario.OFFLINE:
        if r.token_stats is not None:
            return Headline("tokens_per_s", r.token_stats.tokens.output_per_s)
        return Headline("samples_per_s", r.samples_per_s)
    estimate = r.early_stopping.estimate_ns
    key = "p90" if scenario is Scenario.SINGLE_STREAM else "p99"
    if estimate is None:
        return Headline(f"{key}_latency_ns", float(getattr(r.query_latency_ns, key)))
    return Headline(f"early_stopping_{key}_latency_ns", float(estimate))
