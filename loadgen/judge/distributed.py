"""The verdict on a run spread over workers: late starts, clock skew, lost workers, cost.

Two start faults are told apart. A worker released after its first scheduled query by
more than `max_issue_lag_ms` (negative start slack) started late [`start_late`]: its
first queries went out overdue, back to back. The workers' schedules misaligned with each
other (offset errors and drift, the skew bound) [`clock_skew`]: a bound above
`SKEW_WARN_NS` warns, above the warm-up (or one window, without warm-up) the run is
INVALID. A lost worker makes it INVALID too; one that fell silent for longer than
`SILENT_S` and came back is flagged, and so is the harness's own cost: a worker below
`MIN_WORKER_CPU_SHARE` of a core while behind its schedule, a driver above
`MAX_DRIVER_CPU_SHARE`.
"""

from __future__ import annotations

from typing import Any

from loadgen.judge.verdict import Reason, ReasonCode
from loadgen.plan.plan import RunPlan
from loadgen.record.distributed import Distributed

__all__ = ["MAX_DRIVER_CPU_SHARE", "MIN_WORKER_CPU_SHARE", "SILENT_S", "SKEW_WARN_NS",
           "cost_warnings", "distributed_verdict", "skew_limit_ns"]

SKEW_WARN_NS = 1_000_000
SILENT_S = 6.0  # three missed reports (one per progress tick, every 2 s)
MIN_WORKER_CPU_SHARE = 0.9  # of a core, for a worker that was behind its schedule
MAX_DRIVER_CPU_SHARE = 0.1  # of a core, for the driver gathering reports
BEHIND_NS = 1_000_000  # a worker whose median issue lag is above this was saturated


def skew_limit_ns(plan: RunPlan) -> int:
    """The skew bound above which a run is INVALID: the warm-up, else one window."""
    return plan.warmup_ns or plan.window_ns


def distributed_verdict(plan: RunPlan, block: Distributed) -> tuple[list[Reason], list[str]]:
    """Reasons (INVALID) and warnings from a `distributed` block."""
    reasons, warnings = [], []
    tolerance = plan.max_issue_lag_ns
    late = [(w, w.start_slack_ns) for w in block.workers
            if w.start_slack_ns is not None and -w.start_slack_ns > tolerance]
    if late:
        who = "; ".join(f"worker {w.index} on host {w.host} {-slack / 1e6:.3f} ms late"
                        for w, slack in late)
        reasons.append(Reason(ReasonCode.START_LATE, (
            f"{who} (released after its first scheduled query by more than max_issue_lag_ms "
            f"{tolerance / 1e6:g}; start margin {block.start_margin_ns / 1e6:.1f} ms, "
            f"releases took {block.release_cost_ns / 1e6:.3f} ms): its first "
            "queries went out overdue; something held the driver or that worker between the "
            "clock pings and the release (a busy host, a slow network)")))
    skew, limit = block.skew_bound_ns, skew_limit_ns(plan)
    if skew > limit:
        reasons.append(Reason(ReasonCode.CLOCK_SKEW, (
            f"the workers' clock skew bound {skew / 1e6:.3f} ms (the two widest offset errors "
            f"plus drift: {_widest(block)}) exceeds the "
            f"{'warm-up' if plan.warmup_ns else 'window'} ({limit / 1e6:g} ms): their "
            "schedules may not line up; run the driver close to the workers (a shorter round "
            "trip), give them idle cores, or lengthen warmup_s")))
    elif skew > SKEW_WARN_NS:
        warnings.append(f"the workers' clock skew bound is {skew / 1e6:.3f} ms (offset errors "
                        "and drift; see distributed.workers): a long round trip "
                        "to a worker or a busy host; keep it under 1 ms for a sharp start")
    for w in block.workers:
        if w.status == "done" and w.longest_silence_s > SILENT_S:
            warnings.append(f"worker {w.index} on host {w.host} sent no report for "
                            f"{w.longest_silence_s:.1f} s (one is due every 2 s): its host "
                            "or the network stalled; its figures came in late, check that host")
    for lost in block.lost:
        reasons.append(Reason(ReasonCode.WORKER_LOST, (
            f"{lost.label} on host {lost.host} was lost {lost.lost_at_s:.1f} s into "
            f"the run ({lost.why}); its last report reached scheduled time "
            f"{lost.last_report_scheduled_s:.1f} s; {lost.missing} of its "
            f"{lost.planned} queries were never issued (missing), its data up to that "
            "report is kept; nothing is restarted: find why it stopped (the node's logs, "
            "`ray status`, memory) and run again")))
    return reasons, warnings


def _widest(block: Distributed) -> str:
    """The two workers with the widest clock uncertainty, with their figures."""
    ranked = sorted(block.workers, reverse=True, key=lambda w: w.uncertainty_ns)[:2]
    return ", ".join(f"worker {w.index} +-{w.offset_error_ns / 1e6:.3f} ms, drift "
                     f"{w.drift_ns / 1e6:.3f} ms" for w in ranked)


def cost_warnings(workers: dict[str, Any]) -> list[str]:
    """The harness's own cost, from result.json's `workers` block: a worker that was behind
    its schedule but got under `MIN_WORKER_CPU_SHARE` of a core, a driver over
    `MAX_DRIVER_CPU_SHARE`."""
    out = []
    for w in workers.get("per_worker", ()):
        behind = w["issue_lag_ns"]["p50"] > BEHIND_NS
        if behind and w["cpu_share"] < MIN_WORKER_CPU_SHARE:
            out.append(f"worker {w['index']} was behind its schedule (median issue lag "
                       f"{w['issue_lag_ns']['p50'] / 1e6:.3f} ms) yet had only "
                       f"{w['cpu_share']:.0%} of a core ({w.get('involuntary_switches')} "
                       "involuntary context switches): the host is oversubscribed; give each "
                       "load process a core of its own (worker_cpus) or use fewer")
    driver = workers.get("driver")
    if driver is not None and driver["cpu_share"] > MAX_DRIVER_CPU_SHARE:
        out.append(f"the driver used {driver['cpu_share']:.0%} of a core gathering reports "
                   f"(over {MAX_DRIVER_CPU_SHARE:.0%}): it competes with the load processes")
    return out
