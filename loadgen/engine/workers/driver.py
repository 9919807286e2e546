"""The driver: start the workers, set their clocks, release them, gather, merge.

Each worker's clock offset is measured (`clock.measure_offset`) before the
start; each is released at `T0 + its offset`, so all start together on the
driver's clock within the offsets' errors. Reports stream in as the run goes
(the latest one of each worker stands for all it did so far); a watchdog
keeps each worker's longest silence (the judge flags a long one) and gives
it up after `LOST_AFTER_S`.
A lost worker stays lost (no restarts, no rebalancing): the others finish,
its last report is merged, and its unissued share is counted as missing.
Between reports a worker sends light progress (counters and its running
`Glance`); the latest glance is kept, and the progress handed on carries
their merge (the worst p50/p99 and lag, errors summed), as a single process's
does. The offsets are measured again at the end, for drift. The tallies are put
on the driver's clock and merged exactly into one ordinary outcome.
"""

from __future__ import annotations

import contextlib
import dataclasses
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.engine.session import SessionOutcome
from loadgen.engine.workers.base import (
    DONE,
    PROGRESS,
    REPORT,
    Engine,
    Placement,
    Worker,
    WorkerLost,
)
from loadgen.engine.workers.clock import ClockReading, measure_offset, skew_bound_ns
from loadgen.engine.workers.live import LiveView
from loadgen.errors import SutError
from loadgen.plan.plan import RunPlan
from loadgen.plan.schedule import share_size
from loadgen.record.energy import EnergyMeter, EnergyTrace
from loadgen.record.glance import Glance, decode_glance, merge_glances
from loadgen.record.histograms import summary_ns
from loadgen.record.progress import Progress
from loadgen.record.tally import Tally, merge_tallies

__all__ = ["LOST_AFTER_S", "READY_TIMEOUT_S", "START_MARGIN_NS", "Spread", "run_workers"]

READY_TIMEOUT_S = 300.0  # a builtin SUT loads (and maybe trains) its model first
START_MARGIN_NS = 100_000_000  # from the release to the start, beyond the slowest ping
LOST_AFTER_S = 30.0  # a worker silent this long is given up (Ray may take 60 s to say)


@dataclass(frozen=True, slots=True)
class Spread:
    """A run spread over workers: the merged outcome, and the two result blocks."""

    outcome: SessionOutcome
    workers: dict[str, Any]  # each worker's load figures
    distributed: dict[str, Any]  # engine, clocks, skew bound, lost workers


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
    tally: Tally | None = None  # its tally, decoded (on the worker's clock)
    done: bool = False
    lost: str | None = None  # why
    lost_at_s: float = 0.0
    after: ClockReading | None = None
    progress: list[int] = field(default_factory=lambda: [0, 0, 0, 0, 0])
    glance: Glance | None = None  # from its latest report that had one

    @property
    def finished(self) -> bool:
        return self.done or self.lost is not None


def run_workers(plan: RunPlan, spec: str, engine: Engine, out_dir: Path | None = None,
                progress: Callable[[Progress], None] | None = None,
                live: Callable[[LiveView], None] | None = None,
                energy: EnergyMeter | None = None) -> Spread:
    """Run one plan from `plan.settings.workers` workers of `engine`, merged.

    `live` is handed the `LiveView` the driver keeps up to date as reports arrive. An
    `energy` meter runs here, on the driver's host: its idle baseline once every worker's
    SUT is up, its sampling from just before the release until every worker is done.
    """
    trace = None
    try:
        workers = engine.start(plan, spec, out_dir)
        described = [w.wait_ready(READY_TIMEOUT_S) for w in workers]
        tracks = [_Track(w, w.placement(), d, measure_offset(w.clock))
                  for w, d in zip(workers, described, strict=True)]
        t0 = time.perf_counter_ns() + START_MARGIN_NS + 4 * max(t.before.rtt_ns for t in tracks)
        view = LiveView(str(described[0].get("sut", spec.partition(":")[0])))
        if live is not None:
            live(view)
        if energy is not None:
            energy.idle()
            energy.start()
        for t in tracks:
            t.worker.release(t0 + t.before.offset_ns)
        _gather(tracks, engine.poll_s, progress, view if live is not None else None)
        for t in tracks:
            if t.lost is None:
                with contextlib.suppress(WorkerLost):  # gone after its last word: no drift
                    t.after = measure_offset(t.worker.clock)
    finally:
        if energy is not None:
            trace = energy.stop()
        engine.close()
    return _spread(plan, engine, tracks, t0, trace)


def _gather(tracks: list[_Track], poll_s: float, progress: Callable[[Progress], None] | None,
            view: LiveView | None) -> None:
    """Take reports until every worker is done or lost; Ctrl-C interrupts them all."""
    def interrupt(*_: object) -> None:
        for t in tracks:
            if not t.finished:
                t.worker.interrupt()

    try:
        previous = signal.signal(signal.SIGINT, interrupt)
    except ValueError:  # not the main thread: Ctrl-C is someone else's business
        previous = None
    start = time.monotonic()
    for t in tracks:
        t.seen_s = start
    try:
        while not all(t.finished for t in tracks):
            time.sleep(poll_s)
            now = time.monotonic()
            news = [_take(t, now, start) for t in tracks if not t.finished]
            ps = [t.progress for t in tracks]
            issued, finished, in_flight, errors = (sum(p[k] for p in ps) for k in range(1, 5))
            glances = [t.glance for t in tracks if t.glance is not None]
            summed = Progress(max(p[0] for p in ps), issued, finished, in_flight, errors,
                              merge_glances(glances) if glances else None)
            if progress is not None:
                progress(summed)
            if view is not None and any(news):
                view.update(merge_tallies([t.tally for t in tracks if t.tally is not None]),
                            [summed.elapsed_ns, summed.issued, summed.finished,
                             summed.in_flight, summed.errors])
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _take(t: _Track, now: float, start: float) -> bool:
    """One worker's new messages (True if any reported); the watchdog judges its silence."""
    try:
        got = t.worker.messages()
    except WorkerLost as exc:
        t.lost, t.lost_at_s = str(exc), now - start
        return False
    reported = False
    for kind, body in got:
        if kind in (REPORT, PROGRESS, DONE):
            t.progress = list(body["progress"])
            if "glance" in body:
                t.glance = decode_glance(body["glance"])
        if kind in (REPORT, DONE):
            t.last, reported = body, True
            t.done = kind == DONE
    if reported and t.last is not None:
        t.tally = Tally.decode(t.last["tally"])
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


def _spread(plan: RunPlan, engine: Engine, tracks: list[_Track], t0: int,
            energy: EnergyTrace | None) -> Spread:
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
    skew = skew_bound_ns([c["offset_error_ns"] + abs(c["drift_ns"]) + c["start_lateness_ns"]
                          for c in clocks])
    distributed = {**engine.describe(), "split": "seeded thinning",
                   "hosts": len({t.where.host for t in tracks}),
                   "start_ns": t0, "start_margin_ns": START_MARGIN_NS, "skew_bound_ns": skew,
                   "workers": clocks, "lost": lost}
    workers = {"count": count, "split": "seeded thinning of the global schedule",
               "per_worker": [_load_figures(t, tally) for t, tally in parts]}
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


def _clock_figures(t: _Track) -> dict[str, Any]:
    """One worker's clock: offset (worker minus driver), its error, drift, lateness."""
    after = t.after
    return {"index": t.worker.index, "host": t.where.host, "node": t.where.node,
            "status": "lost" if t.lost is not None else "done",
            "offset_ns": t.before.offset_ns, "offset_error_ns": t.before.error_ns,
            "rtt_ns": t.before.rtt_ns,
            "start_lateness_ns": max(int((t.last or {}).get("late_ns", 0)), 0),
            "drift_ns": 0 if after is None else after.offset_ns - t.before.offset_ns,
            "offset_after_ns": None if after is None else after.offset_ns,
            "offset_after_error_ns": None if after is None else after.error_ns,
            "longest_silence_s": round(t.silent_s, 3)}


def _lost_figures(plan: RunPlan, t: _Track, count: int) -> dict[str, Any]:
    """A lost worker: who, where, when, and what of its share never went out."""
    planned = share_size(plan, t.worker.index, count)
    issued = int((t.last or {}).get("issued", 0))
    reached_ns = int((t.last or {}).get("progress", [0])[0])
    return {"index": t.worker.index, "label": t.worker.label, "host": t.where.host,
            "why": t.lost, "lost_at_s": round(t.lost_at_s, 3),
            "last_report_scheduled_s": round(reached_ns / 1e9, 3),
            "planned": planned, "issued": issued, "missing": max(planned - issued, 0),
            "in_flight_at_last_report": int((t.last or {}).get("progress", [0] * 4)[3])}


def _load_figures(t: _Track, tally: Tally) -> dict[str, Any]:
    """One worker's load figures; a `cpu_share` well below 1 at high rates means it did not
    get a core to itself (the host is busy, or has fewer cores than load workers)."""
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
            "latency_ns": {"p50": latency["p50"], "p99": latency["p99"]}}
