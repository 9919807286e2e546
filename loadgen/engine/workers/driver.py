"""The driver: start the workers, set their clocks, release them, gather, merge.

Everything slow starts first (the run's `watch`: the energy meter's idle reading, the
scraper and monitors, the meter's sampling); then each worker's clock offset is
measured (`clock.measure_offset`), T0 set with a margin sized from what releasing
costs, and every worker released at once, at `T0 + its offset`, so all start together
on the driver's clock within the offsets' errors. Reports stream in as the run goes,
each what a worker's tally gained since its last (`record.deltas`), added in place
into that worker's totals (and the live view's); the driver blocks on the engine
between them (`Engine.wait`), never on a timer. A watchdog keeps each worker's longest
silence (the judge flags a long one) and gives it up after `LOST_AFTER_S`. A lost
worker stays lost (no restarts, no rebalancing): the others finish, its last report is
merged, and its unissued share is counted as missing. Between reports a worker sends
light progress (counters and its running `Glance`); the latest glance is kept, and the
progress handed on carries their merge (the worst p50/p99 and lag, errors summed), as
a single process's does. The offsets are measured again at the end, for drift. The
tallies are put on the driver's clock and merged exactly into one ordinary outcome.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.engine.session import SessionOutcome
from loadgen.engine.watch import Watch
from loadgen.engine.workers.base import (
    DONE,
    PROGRESS,
    REPORT,
    STARTED,
    Engine,
    Placement,
    Worker,
    WorkerLost,
)
from loadgen.engine.workers.clock import ClockReading, measure_offset, skew_bound_ns
from loadgen.engine.workers.live import LiveView
from loadgen.errors import SutError
from loadgen.plan.plan import RunPlan
from loadgen.plan.schedule import share_size, split_kind
from loadgen.record.deltas import TallySum
from loadgen.record.distributed import Distributed, LostWorker, WorkerClock
from loadgen.record.energy import EnergyTrace
from loadgen.record.glance import Glance, decode_glance, merge_glances
from loadgen.record.histograms import summary_ns
from loadgen.record.progress import Progress
from loadgen.record.tally import Tally, merge_tallies

__all__ = ["LOST_AFTER_S", "MIN_START_MARGIN_NS", "READY_TIMEOUT_S", "Spread", "run_workers",
           "start_margin_ns"]

READY_TIMEOUT_S = 300.0  # a builtin SUT loads (and maybe trains) its model first
MIN_START_MARGIN_NS = 50_000_000  # from the release to T0, beyond what releasing costs
WAIT_S = 0.5  # the longest the driver blocks on its workers before its watchdog looks
LOST_AFTER_S = 30.0  # a worker silent this long is given up (Ray may take 60 s to say)


@dataclass(frozen=True, slots=True)
class Spread:
    """A run spread over workers: the merged outcome, and the two result blocks."""

    outcome: SessionOutcome
    workers: dict[str, Any]  # each worker's load figures
    distributed: Distributed  # engine, clocks, skew bound, lost workers


@dataclass(slots=True)
class _Track:
    """What the driver knows of one worker."""

    worker: Worker
    where: Placement
    described: dict[str, Any]
    before: ClockReading
    seen_s: float = 0.0
    silent_s: float = 0.0  # the longest silence
    last: dict[str, Any] | None = None  # the latest REPORT or DONE body
    sum: TallySum = field(default_factory=TallySum)  # its reports added up
    tally: Tally | None = None  # its reports' sum (on the worker's clock)
    done: bool = False
    lost: str | None = None  # why
    lost_at_s: float = 0.0
    after: ClockReading | None = None
    progress: list[int] = field(default_factory=lambda: [0, 0, 0, 0, 0])
    glance: Glance | None = None  # from its latest report that had one
    slack_ns: int | None = None  # how long before its first query it was released

    @property
    def finished(self) -> bool:
        return self.done or self.lost is not None


def run_workers(plan: RunPlan, spec: str, engine: Engine, out_dir: Path | None = None,
                progress: Callable[[Progress], None] | None = None,
                watch: Watch | None = None) -> Spread:
    """Run one plan from `plan.settings.workers` workers of `engine`, merged.

    The `watch` (`engine.watch`) runs here, on the driver's host: its monitors read the
    `LiveView` the driver keeps up to date as reports arrive (kept only when one does), its
    energy meter measures this host. Everything slow comes first, once every worker's SUT
    is up: the meter's idle baseline, the monitors, the meter's sampling; only then are the
    clocks measured, T0 set and every worker released at once.
    """
    trace = None
    try:
        workers = engine.start(plan, spec, out_dir)
        described = [w.wait_ready(READY_TIMEOUT_S) for w in workers]
        view = LiveView(str(described[0].get("sut", spec.partition(":")[0])))
        if watch is not None:
            watch.idle()
            watch.started(view, view)
            watch.go()
        tracks = [_Track(w, w.placement(), d, measure_offset(w.clock))
                  for w, d in zip(workers, described, strict=True)]
        margin = start_margin_ns([t.before.rtt_ns for t in tracks])
        t0 = time.perf_counter_ns() + margin
        sent = time.perf_counter_ns()
        for t in tracks:
            t.worker.release(t0 + t.before.offset_ns)
        release = _Release(margin, time.perf_counter_ns() - sent)
        driver = _gather(tracks, engine, progress,
                         view if watch is not None and watch.watched else None)
        for t in tracks:
            if t.lost is None:
                with contextlib.suppress(WorkerLost):  # gone after its last word: no drift
                    t.after = measure_offset(t.worker.clock)
    finally:
        if watch is not None:
            trace = watch.ended()
        engine.close()
    return _spread(plan, engine, tracks, t0, release, driver, trace)


def start_margin_ns(rtts_ns: Sequence[int]) -> int:
    """From the release to T0: `MIN_START_MARGIN_NS`, plus four times what the releases
    cost (one send per worker, each under a round trip) and the slowest round trip."""
    return MIN_START_MARGIN_NS + 4 * (sum(rtts_ns) + max(rtts_ns, default=0))


@dataclass(frozen=True, slots=True)
class _Release:
    """The start margin T0 was set with, and what sending every release took."""

    margin_ns: int
    cost_ns: int


def _gather(tracks: list[_Track], engine: Engine, progress: Callable[[Progress], None] | None,
            view: LiveView | None) -> dict[str, Any]:
    """Take reports until every worker is done or lost, blocking on the engine between
    them; Ctrl-C interrupts them all. The driver's own cost: CPU share, longest gap."""
    def interrupt(*_: object) -> None:
        for t in tracks:
            if not t.finished:
                t.worker.interrupt()

    previous: dict[signal.Signals, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):  # SIGTERM as Ctrl-C
        try:
            previous[signum] = signal.signal(signum, interrupt)
        except ValueError:  # not the main thread: Ctrl-C is someone else's business
            break
    live = TallySum() if view is not None else None
    start = time.monotonic()
    cpu = time.process_time()
    gap = 0.0  # the longest the driver spent away from its wait
    for t in tracks:
        t.seen_s = start
    try:
        while not all(t.finished for t in tracks):
            engine.wait([t.worker for t in tracks if not t.finished], WAIT_S)
            now = time.monotonic()
            news = [_take(t, now, start, live) for t in tracks if not t.finished]
            ps = [t.progress for t in tracks]
            issued, finished, in_flight, errors = (sum(p[k] for p in ps) for k in range(1, 5))
            glances = [t.glance for t in tracks if t.glance is not None]
            summed = Progress(max(p[0] for p in ps), issued, finished, in_flight, errors,
                              merge_glances(glances) if glances else None)
            if progress is not None:
                progress(summed)
            if view is not None and live is not None and any(news):
                view.update(live.tally(), [summed.elapsed_ns, summed.issued, summed.finished,
                             summed.in_flight, summed.errors])
            gap = max(gap, time.monotonic() - now)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    wall = max(time.monotonic() - start, 1e-9)
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return {"cpu_s": round(time.process_time() - cpu, 3),
            "cpu_share": round((time.process_time() - cpu) / wall, 3),
            "largest_read_gap_ns": int(gap * 1e9), "cpus": cores}


def _take(t: _Track, now: float, start: float, live: TallySum | None) -> bool:
    """One worker's new messages (True if any reported), its reports added to its sum (and
    the live one); the watchdog judges its silence."""
    try:
        got = t.worker.messages()
    except WorkerLost as exc:
        t.lost, t.lost_at_s = str(exc), now - start
        return False
    reported = False
    for kind, body in got:
        if kind == STARTED:
            t.slack_ns = int(body["start_slack_ns"])
        if kind in (REPORT, PROGRESS, DONE):
            t.progress = list(body["progress"])
            if "glance" in body:
                t.glance = decode_glance(body["glance"])
        if kind in (REPORT, DONE):
            t.sum.add(body["tally"])
            if live is not None:
                live.add(body["tally"])
            t.last, reported = body, True
            t.done = kind == DONE
    if reported:
        t.tally = t.sum.tally()
    if got:
        t.seen_s = now
    silent = now - t.seen_s
    t.silent_s = max(t.silent_s, silent)
    if silent > LOST_AFTER_S:
        t.lost, t.lost_at_s = f"silent for {silent:.0f} s (the watchdog gave it up)", now - start
    return reported


def _on_driver_clock(tally: Tally, offset_ns: int) -> Tally:
    """A worker's tally with its absolute times moved onto the driver's clock."""
    times = tally.times
    moved = dataclasses.replace(times, start_ns=times.start_ns - offset_ns,
                                measure_start_ns=times.measure_start_ns - offset_ns,
                                issue_end_ns=times.issue_end_ns - offset_ns,
                                end_ns=times.end_ns - offset_ns)
    return dataclasses.replace(tally, times=moved,
                               last_done_ns=max(tally.last_done_ns - offset_ns, 0)
                               if tally.last_done_ns else 0)


def _spread(plan: RunPlan, engine: Engine, tracks: list[_Track], t0: int, release: _Release,
            driver: dict[str, Any], energy: EnergyTrace | None) -> Spread:
    """Merge what came back, and describe the workers and their clocks."""
    parts = [(t, _on_driver_clock(t.tally, t.before.offset_ns))
             for t in tracks if t.tally is not None]
    if not parts:
        raise SutError("every worker was lost before its first report: "
                       + "; ".join(f"{t.worker.label}: {t.lost}" for t in tracks))
    merged = merge_tallies([tally for _, tally in parts])
    if merged.times.start_ns != t0:  # all started at T0 on the driver's clock
        merged = dataclasses.replace(merged, times=dataclasses.replace(merged.times, start_ns=t0))
    cpu = sum(float(t.last.get("cpu_s", 0.0)) for t, _ in parts if t.done and t.last)
    count = len(tracks)
    clocks = [_clock_figures(t) for t in tracks]
    lost = [_lost_figures(plan, t, count) for t in tracks if t.lost is not None]
    skew = skew_bound_ns([c.uncertainty_ns for c in clocks])
    distributed = Distributed.of(engine.describe(), split=split_kind(plan),
                                 hosts=len({t.where.host for t in tracks}),
                                 start_ns=t0, start_margin_ns=release.margin_ns,
                                 release_cost_ns=release.cost_ns, skew_bound_ns=skew,
                                 workers=tuple(clocks), lost=tuple(lost))
    workers = {"count": count, "split": split_kind(plan),
               "per_worker": [_load_figures(t, tally) for t, tally in parts], "driver": driver}
    return Spread(SessionOutcome(merged, _sut(tracks), None, cpu, energy), workers, distributed)


def _sut(tracks: list[_Track]) -> dict[str, Any]:
    """The SUT's description: the first worker's at its end; a replica set's per-replica
    counts are summed over the workers that finished."""
    finals = [t.last["sut"] for t in tracks if t.done and t.last and "sut" in t.last]
    if not finals:
        return tracks[0].described
    first = dict(finals[0])
    if "replicas" in first and all(len(f.get("replicas", ())) == len(first["replicas"])
                                   for f in finals):
        first["replicas"] = [_sum_counts([f["replicas"][i] for f in finals])
                             for i in range(len(first["replicas"]))]
    return first


def _sum_counts(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One replica's figures over several workers: counts added, maxima kept, mean weighed."""
    out = dict(parts[0])
    answered = [p["done"] + p["failed"] for p in parts]
    for key in ("issued", "done", "failed"):
        out[key] = sum(p[key] for p in parts)
    for key in ("max_outstanding", "service_latency_max_ns"):
        out[key] = max(p[key] for p in parts)
    total = sum(answered)
    out["service_latency_mean_ns"] = sum(p["service_latency_mean_ns"] * n for p, n in zip(
        parts, answered, strict=True)) // total if total else 0
    return out


def _clock_figures(t: _Track) -> WorkerClock:
    """One worker's clock: offset (worker minus driver), its error, drift, lateness."""
    after = t.after
    return WorkerClock(
        index=t.worker.index, host=t.where.host, node=t.where.node,
        status="lost" if t.lost is not None else "done",
        offset_ns=t.before.offset_ns, offset_error_ns=t.before.error_ns,
        rtt_ns=t.before.rtt_ns,
        start_lateness_ns=max(int((t.last or {}).get("late_ns", 0)), 0),
        start_slack_ns=t.slack_ns,
        drift_ns=0 if after is None else after.offset_ns - t.before.offset_ns,
        offset_after_ns=None if after is None else after.offset_ns,
        offset_after_error_ns=None if after is None else after.error_ns,
        longest_silence_s=round(t.silent_s, 3))


def _lost_figures(plan: RunPlan, t: _Track, count: int) -> LostWorker:
    """A lost worker: who, where, when, and what of its share never went out."""
    planned = share_size(plan, t.worker.index, count)
    issued = int((t.last or {}).get("issued", 0))
    reached_ns = int((t.last or {}).get("progress", [0])[0])
    return LostWorker(
        index=t.worker.index, label=t.worker.label, host=t.where.host,
        why=str(t.lost), lost_at_s=round(t.lost_at_s, 3),
        last_report_scheduled_s=round(reached_ns / 1e9, 3),
        planned=planned, issued=issued, missing=max(planned - issued, 0),
        in_flight_at_last_report=int((t.last or {}).get("progress", [0] * 4)[3]))


def _load_figures(t: _Track, tally: Tally) -> dict[str, Any]:
    """One worker's load figures and its cost; a `cpu_share` well below 1 at high rates
    means it did not get a core to itself (the host is busy, or has fewer cores than load
    workers)."""
    times = tally.times
    lag, latency = summary_ns(tally.histograms["issue_lag_ns"]), summary_ns(
        tally.histograms["latency_ns"])
    span_s = max((times.issue_end_ns - times.measure_start_ns) / 1e9, 1e-9)
    wall_s = max((times.end_ns - times.start_ns) / 1e9, 1e-9)
    assert t.last is not None, "only a worker that reported has figures"
    cpu_s = float(t.last.get("cpu_s", 0.0))
    return {"index": t.worker.index, "host": t.where.host, "issued": int(t.last["issued"]),
            "queries": tally.queries,
            "errors": sum(tally.errors_by_kind.values()), "qps_scheduled": lag["count"] / span_s,
            "cpu_s": round(cpu_s, 3), "cpu_share": round(cpu_s / wall_s, 3),
            "issue_lag_ns": {"p50": lag["p50"], "p99": lag["p99"], "max": lag["max"]},
            "latency_ns": {"p50": latency["p50"], "p99": latency["p99"]},
            **_cost_figures(t)}


def _cost_figures(t: _Track) -> dict[str, Any]:
    """What a worker says it cost (from its last word), with the slack it said at release."""
    cost = dict((t.last or {}).get("cost", {}))
    return {"start_slack_ns": t.slack_ns if t.slack_ns is not None
            else cost.get("start_slack_ns"),
            "longest_stall_ns": cost.get("longest_stall_ns"),
            "longest_report_ns": cost.get("longest_report_ns"),
            "involuntary_switches": cost.get("involuntary_switches"),
            "messages": cost.get("messages"),
            "sent_kib": None if "sent_bytes" not in cost else round(cost["sent_bytes"] / 1024, 1),
            "cpus": cost.get("cpus"), **_growth_figures(cost)}


def _growth_figures(cost: dict[str, Any]) -> dict[str, Any]:
    """What could make a worker's cost per query grow with the process count: planning
    its share (in all; while it ran), garbage collection, memory, page faults, its core."""
    plan_s = cost.get("plan_s")
    return {"plan_s": None if plan_s is None else round(plan_s[0], 6),
            "plan_in_run_s": None if plan_s is None else round(plan_s[1], 6),
            "gc_collections": cost.get("gc_collections"),
            "gc_ms": None if "gc_ns" not in cost else round(cost["gc_ns"] / 1e6, 3),
            "max_rss_mib": None if "max_rss_kib" not in cost
            else round(cost["max_rss_kib"] / 1024, 1),
            "minor_faults": cost.get("minor_faults"), "last_cpu": cost.get("last_cpu")}
