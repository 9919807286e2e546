"""A finished run's figures, scenario-neutral: summaries, counts, rates, early stopping.

Pure: (plan, tally) -> RunStats. No clock, no formatting. The tally is one
collector's, or several load processes' merged. Every figure here is a typed
record; `as_dict` gives the result.json form and `from_dict` reads it back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.judge import early_stopping
from loadgen.judge.adjusted import ADJUSTED_PERCENTILES, adjusted_percentiles, error_adjusted
from loadgen.judge.jobstats import JobStats, summarize_jobs
from loadgen.judge.tokenstats import TokenStats, summarize_tokens
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import IssueMode, Scenario
from loadgen.record.histograms import decode, encode, percentile_ns, summary_ns
from loadgen.record.tally import Accuracy, Tally
from loadgen.record.windows import steps_report, timeline_report

_ADJUSTED = "_error_adjusted"

__all__ = ["ComponentSummary", "EarlyStopping", "ErrorDetail", "LatencySummary", "RunStats",
           "measured_window_ns", "summarize"]


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Percentiles, mean, extremes and count of one histogram, in ns (zeros when empty)."""

    p50: int = 0
    p90: int = 0
    p95: int = 0
    p99: int = 0
    p999: int = 0
    mean: int = 0
    min: int = 0
    max: int = 0
    count: int = 0
    error_adjusted: dict[str, int | None] | None = None
    """`p50`, `p90`, `p99` (and the SLO's percentile) with failed and unfinished queries
    counted as infinite (None) or at the query timeout (`judge.adjusted`); written as
    `p99_error_adjusted` and so on beside the finished-only ones."""

    @classmethod
    def of(cls, hist: HdrHistogram, failed: int | None = None,
           percentiles: tuple[float, ...] = ADJUSTED_PERCENTILES,
           cap_ns: int | None = None) -> LatencySummary:
        """The summary of a histogram; with `failed`, its error-adjusted percentiles too."""
        adjusted = None if failed is None else error_adjusted(hist, failed, percentiles, cap_ns)
        return cls(**summary_ns(hist), error_adjusted=adjusted)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> LatencySummary:
        """Read back `as_dict` (keys it does not know are ignored)."""
        adjusted = {k.removesuffix(_ADJUSTED): v for k, v in doc.items()
                    if k.endswith(_ADJUSTED)}
        return cls(**{f.name: int(doc.get(f.name, 0)) for f in dataclasses.fields(cls)
                      if f.name != "error_adjusted"}, error_adjusted=adjusted or None)

    def as_dict(self) -> dict[str, Any]:
        """Plain values, keyed as in result.json."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                               if f.name != "error_adjusted"}
        for key, value in (self.error_adjusted or {}).items():
            out[f"{key}{_ADJUSTED}"] = value
        return out


@dataclass(frozen=True, slots=True)
class ComponentSummary:
    """One component's latency summary and its share of the mean end-to-end latency."""

    latency: LatencySummary
    share: float

    def as_dict(self) -> dict[str, Any]:
        """The summary's keys plus `share`."""
        return self.latency.as_dict() | {"share": self.share}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ComponentSummary:
        """Read back `as_dict`."""
        return cls(LatencySummary.from_dict(doc), float(doc.get("share", 0.0)))


@dataclass(frozen=True, slots=True)
class EarlyStopping:
    """MLPerf early stopping at `percentile` with 99% confidence.

    With an SLO: how many queries were over it, how many the bound allows and
    whether the run passes. SingleStream and MultiStream: the estimate of the
    percentile (the latency at `estimate_rank`), None when too few queries.
    """

    percentile: float
    queries: int
    confidence: float = 0.99
    target_latency_ns: int | None = None
    overlatency: int | None = None
    max_overlatency_allowed: int | None = None
    min_queries_needed: int | None = None
    passes: bool | None = None
    estimate_rank: int | None = None
    estimate_ns: int | None = None
    has_estimate: bool = False

    def as_dict(self) -> dict[str, Any]:
        """result.json's form: the SLO keys only with an SLO, the estimate keys only with one."""
        out: dict[str, Any] = {"percentile": self.percentile, "confidence": self.confidence,
                               "queries": self.queries}
        if self.passes is not None:
            out |= {"target_latency_ns": self.target_latency_ns, "overlatency": self.overlatency,
                    "max_overlatency_allowed": self.max_overlatency_allowed,
                    "min_queries_needed": self.min_queries_needed, "passes": self.passes}
        if self.has_estimate:
            out |= {"estimate_rank": self.estimate_rank, "estimate_ns": self.estimate_ns}
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> EarlyStopping:
        """Read back `as_dict`."""
        names = {f.name for f in dataclasses.fields(cls)} - {"has_estimate"}
        return cls(**{k: v for k, v in doc.items() if k in names},
                   has_estimate="estimate_rank" in doc)


@dataclass(frozen=True, slots=True)
class ErrorDetail:
    """One error kind: how many queries failed so, and the first few distinct messages."""

    count: int
    messages: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """{"count": n, "messages": [...]}, as in result.json's `errors_detail`."""
        return {"count": self.count, "messages": list(self.messages)}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ErrorDetail:
        """Read back `as_dict`."""
        return cls(int(doc["count"]), tuple(map(str, doc.get("messages", ()))))


_SUMMARIES = ("latency_ns", "service_latency_ns", "issue_lag_ns", "query_latency_ns")


@dataclass(frozen=True, slots=True)
class RunStats:
    """Everything the verdict and the reports read about one run."""

    queries: int
    samples: int
    errors: int
    errors_by_kind: dict[str, int]
    errors_detail: dict[str, ErrorDetail]  # by kind, most frequent first
    unfinished: int
    late: int
    duration_s: float
    qps_scheduled: float
    qps_completed: float
    samples_per_s: float
    goodput_qps: float
    overlatency: int
    latency_ns: LatencySummary  # each sample, from its query's scheduled time
    service_latency_ns: LatencySummary  # each query, from its actual send
    issue_lag_ns: LatencySummary  # send minus scheduled
    query_latency_ns: LatencySummary  # each query (MultiStream: its slowest sample)
    target_latency_at_ns: int  # query latency at the SLO percentile (0 without queries)
    components_ns: dict[str, ComponentSummary]
    batch_sizes: dict[int, int]
    early_stopping: EarlyStopping
    interrupted: bool
    out_of_range: int
    accuracy: Accuracy | None = None
    timeline: list[dict[str, Any]] = field(default_factory=list, repr=False)
    steps: list[dict[str, Any]] = field(default_factory=list, repr=False)
    histograms: dict[str, str] = field(default_factory=dict, repr=False)
    token_stats: TokenStats | None = None  # a token-stream run's figures (its own keys)
    job_stats: JobStats | None = None  # agentic jobs' figures (result.json's `jobs`)

    def as_dict(self) -> dict[str, Any]:
        """result.json's figures (accuracy is written by the result, beside its target)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "accuracy":
                continue
            if f.name == "token_stats":
                if value is not None:
                    out |= value.as_dict()
                continue
            if f.name == "job_stats":
                if value is not None:
                    out["jobs"] = value.as_dict()
                continue
            if isinstance(value, LatencySummary | EarlyStopping):
                value = value.as_dict()
            elif f.name in ("components_ns", "errors_detail"):
                value = {k: c.as_dict() for k, c in value.items()}
            elif f.name == "batch_sizes":
                value = {str(k): v for k, v in value.items()}
            elif isinstance(value, dict | list):
                value = type(value)(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RunStats:
        """Read the figures of a result.json (schema 1 or 2)."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name == "token_stats":
                values[f.name] = TokenStats.from_dict(doc)
                continue
            if f.name == "job_stats":
                values[f.name] = JobStats.from_dict(doc.get("jobs"))
                continue
            if f.name not in doc:
                continue
            value = doc[f.name]
            if f.name in _SUMMARIES:
                value = LatencySummary.from_dict(value)
            elif f.name == "early_stopping":
                value = EarlyStopping.from_dict(value)
            elif f.name == "components_ns":
                value = {k: ComponentSummary.from_dict(c) for k, c in value.items()}
            elif f.name == "errors_detail":
                value = {k: ErrorDetail.from_dict(d) for k, d in value.items()}
            elif f.name == "batch_sizes":
                value = {int(k): int(v) for k, v in value.items()}
            values[f.name] = value
        accuracy = doc.get("accuracy")
        if isinstance(accuracy, dict):
            values["accuracy"] = Accuracy(accuracy.get("value"), int(accuracy.get("samples", 0)))
        if "target_latency_at_ns" not in values:  # schema 1: from the histogram, if kept
            values["target_latency_at_ns"] = _at_target(doc)
        if "errors_detail" not in values:  # schema 1 kept counts only
            values["errors_detail"] = _detail(values.get("errors_by_kind", {}), {})
        return cls(**values)


def _at_target(doc: dict[str, Any]) -> int:
    """A version-1 result's query latency at the SLO percentile (it did not record it)."""
    p = float(doc.get("settings", {}).get("target_latency_percentile", 99.0))
    blob = doc.get("histograms", {}).get("query_latency_ns")
    if blob is None:
        return int(doc["query_latency_ns"].get(f"p{p:g}".replace(".", ""), 0) or 0)
    return int(percentile_ns(decode(blob), p))


def measured_window_ns(plan: RunPlan, c: Tally) -> tuple[int, int]:
    """The span the rates divide by (perf_counter ns): from the start of measurement
    (Offline: of the run) to the last measured completion."""
    times = c.times
    start = times.start_ns if plan.issue_mode is IssueMode.OFFLINE else times.measure_start_ns
    return start, max(c.last_done_ns, start)


def summarize(plan: RunPlan, c: Tally, accuracy: Accuracy | None = None,
              tokenizer: str | None = None) -> RunStats:
    """Reduce a run's tally to the figures of record (`tokenizer`: the one the SUT counted
    tokens with, where it names its own)."""
    times = c.times
    start, end = measured_window_ns(plan, c)
    duration_s = (end - start) / 1e9
    scheduled_span_s = max((times.issue_end_ns - times.measure_start_ns) / 1e9, 1e-9)
    hists = c.histograms
    measured_issued = int(hists["issue_lag_ns"].total_count)
    failed = sum(c.errors_by_kind.values()) + times.unfinished
    adjusted = adjusted_percentiles(plan.settings.target_latency_percentile)
    cap = plan.query_timeout_ns or None
    latency = LatencySummary.of(hists["query_latency_ns"], failed, adjusted, cap)
    components = {name: _component(LatencySummary.of(h), latency.mean)
                  for name, h in sorted(c.components.items())}
    good = c.queries - c.overlatency
    per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: 0.0)
    p = plan.settings.target_latency_percentile
    return RunStats(
        queries=c.queries,
        samples=c.samples,
        errors=sum(c.errors_by_kind.values()),  # warm-up errors count too
        errors_by_kind=dict(c.errors_by_kind),
        errors_detail=_detail(c.errors_by_kind, c.error_messages),
        unfinished=times.unfinished,
        late=c.late,
        duration_s=duration_s,
        qps_scheduled=measured_issued / scheduled_span_s,
        qps_completed=per_s(c.queries),
        samples_per_s=per_s(c.samples),
        goodput_qps=per_s(good) if plan.slo_ns else per_s(c.queries),
        overlatency=c.overlatency,
        latency_ns=LatencySummary.of(hists["latency_ns"], failed, adjusted, cap),
        service_latency_ns=LatencySummary.of(hists["service_latency_ns"]),
        issue_lag_ns=LatencySummary.of(hists["issue_lag_ns"]),
        query_latency_ns=latency,
        target_latency_at_ns=percentile_ns(hists["query_latency_ns"], p) if c.queries else 0,
        components_ns=components,
        batch_sizes=dict(sorted(c.batch_sizes.items())),
        early_stopping=_early_stopping(plan, c, hists["query_latency_ns"]),
        interrupted=times.interrupted,
        out_of_range=c.out_of_range,
        accuracy=accuracy,
        timeline=timeline_report(c.windows, (times.measure_start_ns - times.start_ns) / 1e9),
        steps=_steps(plan, c),
        histograms={name: encode(h) for name, h in hists.items() if h.get_total_count()},
        token_stats=None if c.tokens is None else summarize_tokens(
            plan, c.tokens, duration_s, times.unfinished, tokenizer),
        job_stats=None if c.jobs is None else summarize_jobs(c.jobs, p),
    )



def _detail(counts: dict[str, int], messages: dict[str, tuple[str, ...]],
            ) -> dict[str, ErrorDetail]:
    """Each error kind's count and messages, the most frequent kind first."""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {kind: ErrorDetail(n, messages.get(kind, ())) for kind, n in ranked}


def _component(summary: LatencySummary, end_to_end_mean: int) -> ComponentSummary:
    share = round(summary.mean / end_to_end_mean, 4) if end_to_end_mean else 0.0
    return ComponentSummary(summary, share)


def _steps(plan: RunPlan, c: Tally) -> list[dict[str, Any]]:
    """Per-step figures of a stepped run (else none)."""
    steps = plan.steps
    if steps is None or not c.windows.steps:
        return []
    times = c.times
    measured = ((times.measure_start_ns - times.start_ns) / 1e9,
                (times.issue_end_ns - times.start_ns) / 1e9)
    return steps_report(c.windows, steps.starts_s, measured, steps.mean_qps)


def _early_stopping(plan: RunPlan, c: Tally, query_hist: HdrHistogram) -> EarlyStopping:
    s = plan.settings
    p = s.target_latency_percentile
    n = c.queries
    figures = EarlyStopping(percentile=p, queries=n)
    if s.scenario is Scenario.SERVER or plan.slo_ns:
        k = c.overlatency
        figures = dataclasses.replace(
            figures, target_latency_ns=plan.slo_ns, overlatency=k,
            max_overlatency_allowed=early_stopping.max_overlatency(n, p),
            min_queries_needed=early_stopping.min_queries(p, k),
            passes=early_stopping.passes(n, k, p))
    if s.scenario in (Scenario.SINGLE_STREAM, Scenario.MULTI_STREAM) and n:
        rank = early_stopping.estimate_rank(n, p)
        estimate = None if rank is None else percentile_ns(query_hist, 100.0 * rank / n)
        figures = dataclasses.replace(figures, estimate_rank=rank, estimate_ns=estimate,
                                      has_estimate=True)
    return figures
