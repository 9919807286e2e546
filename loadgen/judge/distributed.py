"""The verdict on a run spread over workers: its clock skew, and any worker lost.

A skew bound above `SKEW_WARN_NS` warns; above the warm-up (or one window,
without warm-up) the workers' schedules may be misaligned by more than the
run can absorb, and the run is INVALID. A lost worker makes it INVALID too; one
that fell silent for longer than `SILENT_S` and came back is flagged.
"""

from __future__ import annotations

from typing import Any

from loadgen.judge.verdict import Reason, ReasonCode
from loadgen.plan.plan import RunPlan

__all__ = ["SILENT_S", "SKEW_WARN_NS", "distributed_verdict", "skew_limit_ns"]

SKEW_WARN_NS = 1_000_000
SILENT_S = 6.0  # three missed reports (one per progress tick, every 2 s)


def skew_limit_ns(plan: RunPlan) -> int:
    """The skew bound above which a run is INVALID: the warm-up, else one window."""
    return plan.warmup_ns or plan.window_ns


def distributed_verdict(plan: RunPlan, block: dict[str, Any]) -> tuple[list[Reason], list[str]]:
    """Reasons (INVALID) and warnings from a `distributed` block."""
    reasons, warnings = [], []
    skew, limit = int(block["skew_bound_ns"]), skew_limit_ns(plan)
    if skew > limit:
        reasons.append(Reason(ReasonCode.CLOCK_SKEW, (
            f"the workers' clock skew bound {skew / 1e6:.3f} ms exceeds the "
            f"{'warm-up' if plan.warmup_ns else 'window'} ({limit / 1e6:g} ms): their "
            "schedules may not line up; run the driver close to the workers (a shorter round "
            "trip), give them idle cores, or lengthen warmup_s")))
    elif skew > SKEW_WARN_NS:
        warnings.append(f"the workers' clock skew bound is {skew / 1e6:.3f} ms (offset errors, "
                        "drift and late starts; see distributed.workers): a long round trip "
                        "to a worker or a busy host; keep it under 1 ms for a sharp start")
    for w in block.get("workers", ()):
        if w["status"] == "done" and w["longest_silence_s"] > SILENT_S:
            warnings.append(f"worker {w['index']} on host {w['host']} sent no report for "
                            f"{w['longest_silence_s']:.1f} s (one is due every 2 s): its host "
                            "or the network stalled; its figures came in late, check that host")
    for lost in block.get("lost", ()):
        reasons.append(Reason(ReasonCode.WORKER_LOST, (
            f"{lost['label']} on host {lost['host']} was lost {lost['lost_at_s']:.1f} s into "
            f"the run ({lost['why']}); its last report reached scheduled time "
            f"{lost['last_report_scheduled_s']:.1f} s; {lost['missing']} of its "
            f"{lost['planned']} queries were never issued (missing), its data up to that "
            "report is kept; nothing is restarted: find why it stopped (the node's logs, "
            "`ray status`, memory) and run again")))
    return reasons, warnings
