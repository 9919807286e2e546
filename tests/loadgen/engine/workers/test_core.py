"""A worker's own cost figures: garbage collections timed, its last core read; what a
report costs its issue loop."""

import gc
import os
import pickle
import time
from typing import Any

from loadgen.engine.runner import PROGRESS_EVERY_NS
from loadgen.engine.session import run_loop
from loadgen.engine.workers import core
from loadgen.engine.workers.base import DONE, PROGRESS, REPORT
from loadgen.engine.workers.core import WorkerCore, _GcClock, _last_cpu
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import load_settings
from loadgen.record.deltas import TallySum
from loadgen.record.progress import Progress


def test_the_gc_clock_counts_and_times_collections_only_while_on():
    clock = _GcClock()
    gc.collect()  # before the start: not counted
    clock.start()
    gc.collect()
    gc.collect()
    collections, ns = clock.stop()
    assert collections >= 2 and ns > 0
    gc.collect()  # after the stop: not counted, and the callback is gone
    assert clock.stop() == (collections, ns)
    assert clock._tick not in gc.callbacks


def test_the_last_core_is_one_this_process_may_run_on():
    assert _last_cpu() in os.sched_getaffinity(0)


def test_a_report_sends_gains_and_leaves_the_buffers_to_the_engine(monkeypatch):
    """#28: a report held a worker's issue loop 5-7 ms every 2 s at 200k QPS (V2 blobs of
    every histogram, a flush of every buffer); it now records nothing and compresses
    nothing, and the reports still add up to the whole tally."""
    monkeypatch.setattr(core, "REPORT_EVERY_NS", PROGRESS_EVERY_NS)  # every tick reports
    plan = RunPlan.of(load_settings(None, [
        "preset='dev'", "target_qps=20000", "target_latency_ms=50", "min_duration_s=1.2",
        "min_query_count=100", "warmup_s=0", "energy='off'"]))
    sent: list[tuple[str, Any]] = []
    pending_kept: list[int] = []  # values still buffered after each report

    def send(kind: str, body: Any) -> int:
        sent.append((kind, body))
        return 0

    worker = WorkerCore(plan, "null", 0, 1, None, send)
    tick = worker._tick

    def watched(p: Progress) -> None:
        c = worker.collector
        before = None if c is None else [r.pending for r in c._recorders]
        tick(p)
        if c is not None and sent[-1][0] == REPORT:
            after = [r.pending for r in c._recorders]
            assert after == before  # nothing recorded on the issue loop by a report
            pending_kept.append(sum(after))

    monkeypatch.setattr(worker, "_tick", watched)

    async def release() -> int:
        return time.perf_counter_ns() + 20_000_000

    run_loop(worker.run(release))
    reports = [body for kind, body in sent if kind in (REPORT, DONE)]
    assert len(reports) >= 4 and any(pending_kept), pending_kept
    blobs = [b for r in reports for b in r["tally"]["histograms"].values() if b is not None]
    assert blobs and all(isinstance(b, bytes) and b.startswith(b"hdrgain1") for b in blobs)
    total = TallySum()
    for r in reports:
        total.add(pickle.loads(pickle.dumps(r["tally"])))
    done = reports[-1]
    assert total.tally().histograms["issue_lag_ns"].total_count == done["issued"] > 20_000
    assert done["cost"]["longest_report_ns"] > 0


def test_a_worker_glances_once_a_second_not_every_tick(monkeypatch):
    """A glance holds the issue loop about half a millisecond; the in-process Server
    probes took none, a worker took one every 250 ms (#28)."""
    plan = RunPlan.of(load_settings(None, [
        "preset='dev'", "target_qps=5000", "target_latency_ms=50", "min_duration_s=1.6",
        "min_query_count=100", "warmup_s=0", "energy='off'"]))
    sent: list[tuple[str, Any]] = []

    def send(kind: str, body: Any) -> int:
        sent.append((kind, body))
        return 0

    async def release() -> int:
        return time.perf_counter_ns() + 20_000_000

    run_loop(WorkerCore(plan, "null", 0, 1, None, send).run(release))
    ticks = [body for kind, body in sent if kind in (PROGRESS, REPORT)]
    with_glance = [i for i, body in enumerate(ticks) if "glance" in body]
    assert len(ticks) >= 6 and with_glance[:2] == [0, core.GLANCE_EVERY_TICKS], with_glance
