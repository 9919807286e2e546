"""A finished run's figures, scenario-neutral: summaries, counts, rates, early stopping.

Pure: (settings, tally, times) -> RunStats. No clock, no formatting. The tally
is one collector's, or several load processes' merged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.judge import early_stopping
from loadgen.plan.arrivals import steps_for
from loadgen.record.histograms import encode, percentile_ns, summary_ns
from loadgen.engine.runner import RunTimes
from loadgen.plan.settings import Scenario, TestSettings
from loadgen.record.tally import Tally
from loadgen.record.windows import steps_report, timeline_report

__all__ = ["RunStats", "summarize"]


@dataclass(frozen=True, slots=True)
class RunStats:
    """Everything the verdict and the reports read about one run."""

    queries: int
    samples: int
    errors: int
    errors_by_kind: dict[str, int]
    unfinished: int
    late: int
    duration_s: float
    qps_scheduled: float
    qps_completed: float
    samples_per_s: float
    goodput_qps: float
    overlatency: int
    latency_ns: dict[str, int]
    service_latency_ns: dict[str, int]
    issue_lag_ns: dict[str, int]
    query_latency_ns: dict[str, int]
    components_ns: dict[str, dict[str, Any]]
    batch_sizes: dict[int, int]
    early_stopping: dict[str, Any]
    interrupted: bool
    out_of_range: int
    timeline: list[dict[str, Any]] = field(repr=False)
    steps: list[dict[str, Any]] = field(repr=False)
    histograms: dict[str, str] = field(repr=False)


def summarize(settings: TestSettings, c: Tally, times: RunTimes) -> RunStats:
    """Reduce a run's tally to the figures of record."""
    start = times.start_ns if settings.scenario is Scenario.OFFLINE else times.measure_start_ns
    end = max(c.last_done_ns, start)
    duration_s = (end - start) / 1e9
    scheduled_span_s = max((times.issue_end_ns - times.measure_start_ns) / 1e9, 1e-9)
    hists = c.histograms
    measured_issued = int(hists["issue_lag_ns"].total_count)
    latency = summary_ns(hists["query_latency_ns"])
    components: dict[str, dict[str, Any]] = {
        name: dict(summary_ns(h)) for name, h in sorted(c.components.items())}
    for summary in components.values():
        summary["share"] = round(summary["mean"] / latency["mean"], 4) if latency["mean"] else 0.0
    good = c.queries - c.overlatency
    per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: 0.0)
    return RunStats(
        queries=c.queries,
        samples=c.samples,
        errors=sum(c.errors_by_kind.values()),  # warm-up errors count too
        errors_by_kind=dict(c.errors_by_kind),
        unfinished=times.unfinished,
        late=c.late,
        duration_s=duration_s,
        qps_scheduled=measured_issued / scheduled_span_s,
        qps_completed=per_s(c.queries),
        samples_per_s=per_s(c.samples),
        goodput_qps=per_s(good) if settings.target_latency_ms else per_s(c.queries),
        overlatency=c.overlatency,
        latency_ns=summary_ns(hists["latency_ns"]),
        service_latency_ns=summary_ns(hists["service_latency_ns"]),
        issue_lag_ns=summary_ns(hists["issue_lag_ns"]),
        query_latency_ns=latency,
        components_ns=components,
        batch_sizes=dict(sorted(c.batch_sizes.items())),
        early_stopping=_early_stopping(settings, c, hists["query_latency_ns"]),
        interrupted=times.interrupted,
        out_of_range=c.out_of_range,
        timeline=timeline_report(c.windows, (times.measure_start_ns - times.start_ns) / 1e9),
        steps=_steps(settings, c, times),
        histograms={name: encode(h) for name, h in hists.items() if h.get_total_count()},
    )


def _steps(settings: TestSettings, c: Tally, times: RunTimes) -> list[dict[str, Any]]:
    """Per-step figures of a stepped run (else none)."""
    if settings.arrival != "steps" or not c.windows.steps:
        return []
    plan = steps_for(settings)
    measured = ((times.measure_start_ns - times.start_ns) / 1e9,
                (times.issue_end_ns - times.start_ns) / 1e9)
    return steps_report(c.windows, plan.starts_s, measured, plan.mean_qps)


def _early_stopping(settings: TestSettings, c: Tally, query_hist: HdrHistogram) -> dict[str, Any]:
    p = settings.target_latency_percentile
    n = c.queries
    figures: dict[str, Any] = {"percentile": p, "confidence": 0.99, "queries": n}
    if settings.scenario is Scenario.SERVER or settings.target_latency_ms:
        k = c.overlatency
        figures |= {
            "target_latency_ns": int(settings.target_latency_ms * 1e6),
            "overlatency": k,
            "max_overlatency_allowed": early_stopping.max_overlatency(n, p),
            "min_queries_needed": early_stopping.min_queries(p, k),
            "passes": early_stopping.passes(n, k, p),
        }
    if settings.scenario in (Scenario.SINGLE_STREAM, Scenario.MULTI_STREAM) and n:
        rank = early_stopping.estimate_rank(n, p)
        figures["estimate_rank"] = rank
        figures["estimate_ns"] = (
            None if rank is None else percentile_ns(query_hist, 100.0 * rank / n)
        )
    return figures
