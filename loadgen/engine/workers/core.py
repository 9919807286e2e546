"""One worker's side, whatever engine hosts it: its share of the plan, reported as it goes.

`WorkerCore.run` builds the SUT from its spec, runs the ordinary run session
on the worker's share of the plan, says READY through its gate, waits for its
release, says STARTED with its start slack (how long before its first scheduled
query it was released; below 0, it was late), and sends a REPORT every
`REPORT_EVERY_NS` (what its tally gained since the last one, `record.deltas`: the
cost of a report follows the interval, not the run; its histograms go as raw count
gains (`histograms.gain`, no zlib) and its recorders' buffers are left to the engine's
own small slices, so a report holds the issue loop about 1 ms at 160k QPS on a 16-core
host, where V2 blobs and a full flush held it 5-7 ms at 200k QPS; a worker lost later
leaves everything up to its last report behind), a light PROGRESS at the other progress ticks (its counters and running
`Glance`, for the live display; a few hundred bytes) and DONE at the end, with its own
cost: CPU time, longest stall of its loop, the longest a tick's own work (a report)
held the loop (`longest_report_ns`), involuntary context switches, messages and bytes
sent, its cores, and what could make its cost per query grow with the number of
processes: time spent planning its share (in all, and while it ran), garbage
collections and their time, peak RSS and minor page faults (collections and faults
counted from its release), and the core it last ran on.
"""

from __future__ import annotations

import gc
import os
import resource
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from loadgen.engine.runner import PROGRESS_EVERY_NS
from loadgen.engine.session import Share, run_session
from loadgen.engine.workers.base import DONE, PROGRESS, READY, REPORT, STARTED
from loadgen.plan.plan import RunPlan
from loadgen.record.collect import Collector
from loadgen.record.deltas import TallyDeltas
from loadgen.record.glance import encode_glance
from loadgen.record.progress import Progress
from loadgen.record.tally import RunTimes

__all__ = ["GLANCE_EVERY_TICKS", "REPORT_EVERY_NS", "WorkerCore"]

REPORT_EVERY_NS = 2_000_000_000
"""A report (the tally's gain: histograms, counters, windows) this often; progress between."""
GLANCE_EVERY_TICKS = 4
"""A running `Glance` once a second (every 4th progress tick): each holds the issue loop
about half a millisecond, and the in-process engine without a display takes none."""

Send = Callable[[str, Any], int]
"""Sends one message (kind, body); returns the bytes it took on the wire."""


class WorkerCore:
    """Runs share `index` of `count` of a plan against a SUT built from `spec`."""

    def __init__(self, plan: RunPlan, spec: str, index: int, count: int,
                 log_dir: Path | None, send: Send, release_gil: bool = False) -> None:
        self.plan, self.spec, self.share = plan, spec, Share(index, count)
        self.release_gil = release_gil
        self.log_dir = log_dir
        self._send = send
        self.collector: Collector | None = None
        self.late_ns = 0
        self.slack_ns = 0
        self.messages = self.sent_bytes = 0
        self.longest_stall_ns = 0
        self.longest_report_ns = 0  # the longest a progress tick's own work held the loop
        self._last_tick_ns: int | None = None  # elapsed time of the previous progress tick
        self._switches = 0  # involuntary context switches before the start
        self._faults = 0  # minor page faults before the start
        self._gc = _GcClock()
        self._deltas = TallyDeltas()
        self._next_report_ns = REPORT_EVERY_NS  # elapsed time of the next full report
        self._interrupt: Callable[[], None] | None = None

    def interrupt(self) -> None:
        """Stop issuing now (Ctrl-C at the driver); the session drains and reports."""
        if self._interrupt is not None:
            self._interrupt()

    async def run(self, release: Callable[[], Awaitable[int]]) -> None:
        """The whole session; `release` waits for the start deadline (this host's clock)."""
        from loadgen.adapters.registry import make_sut

        async def gate(described: dict[str, Any], first_offset_ns: int | None) -> int:
            self.send(READY, described)
            deadline = await release()
            now = time.perf_counter_ns()
            self.late_ns = now - deadline  # < 0: it was waiting in time
            self.slack_ns = deadline + (first_offset_ns or 0) - now
            self._switches = _involuntary_switches()
            self._faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            self._gc.start()
            self.send(STARTED, {"start_slack_ns": self.slack_ns})
            return deadline

        def started(collector: Collector) -> None:
            self.collector = collector

        outcome = await run_session(self.plan, make_sut(self.spec), share=self.share,
                                    progress=self._report, log_dir=self.log_dir,
                                    started=started, gate=gate, interrupts=self._take_interrupt,
                                    release_gil=self.release_gil,
                                    glance_every=GLANCE_EVERY_TICKS)
        assert self.collector is not None
        self.send(DONE, {"tally": self._deltas.take(outcome.tally), "cpu_s": outcome.cpu_s,
                         "sut": outcome.sut,
                         "late_ns": self.late_ns, "issued": self.collector.issued,
                         "progress": _progress(self.collector, outcome.tally.times.end_ns
                                               - outcome.tally.times.start_ns),
                         "cost": self._cost() | {"plan_s": list(outcome.plan_s)}})

    def send(self, kind: str, body: Any) -> None:
        """Send one message, counted."""
        self.sent_bytes += self._send(kind, body)
        self.messages += 1

    def _cost(self) -> dict[str, Any]:
        """What this worker cost its host: slack, stalls, switches, messages, cores."""
        cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        usage = resource.getrusage(resource.RUSAGE_SELF)
        collections, gc_ns = self._gc.stop()
        return {"start_slack_ns": self.slack_ns, "longest_stall_ns": self.longest_stall_ns,
                "longest_report_ns": self.longest_report_ns,
                "involuntary_switches": _involuntary_switches() - self._switches,
                "messages": self.messages, "sent_bytes": self.sent_bytes, "cpus": cores,
                "gc_collections": collections, "gc_ns": gc_ns,
                "max_rss_kib": usage.ru_maxrss, "minor_faults": usage.ru_minflt - self._faults,
                "last_cpu": _last_cpu()}

    def _take_interrupt(self, interrupt: Callable[[], None]) -> None:
        self._interrupt = interrupt

    def _report(self, p: Progress) -> None:
        """A progress tick, timed: what it held the issue loop for is `longest_report_ns`."""
        began = time.perf_counter_ns()
        self._tick(p)
        self.longest_report_ns = max(self.longest_report_ns, time.perf_counter_ns() - began)

    def _tick(self, p: Progress) -> None:
        """The counters and glance; every `REPORT_EVERY_NS` also what the tally gained (the
        windows and histograms as recorded so far)."""
        c = self.collector
        if c is None:
            return
        if self._last_tick_ns is not None:  # a tick is due every PROGRESS_EVERY_NS
            stall = p.elapsed_ns - self._last_tick_ns - PROGRESS_EVERY_NS
            self.longest_stall_ns = max(self.longest_stall_ns, stall)
        self._last_tick_ns = p.elapsed_ns
        body: dict[str, Any] = {"progress": _progress(c, p.elapsed_ns)}
        if p.glance is not None:
            body["glance"] = encode_glance(p.glance)
        if p.elapsed_ns < self._next_report_ns:
            self.send(PROGRESS, body)
            return
        self._next_report_ns = (p.elapsed_ns // REPORT_EVERY_NS + 1) * REPORT_EVERY_NS
        now = time.perf_counter_ns()
        t0 = now - p.elapsed_ns
        so_far = RunTimes(t0, t0 + self.plan.warmup_ns, now, now, False, 0)
        self.send(REPORT, {**body, "tally": self._deltas.take(c.tally(so_far, flush=False)),
                           "issued": c.issued,
                           "late_ns": self.late_ns})


class _GcClock:
    """Garbage collections and the time they took, from `start` to `stop`."""

    def __init__(self) -> None:
        self.collections = self.ns = 0
        self._began = 0
        self._on = False

    def start(self) -> None:
        if not self._on:
            self._on = True
            gc.callbacks.append(self._tick)

    def stop(self) -> tuple[int, int]:
        """(collections, ns) so far; the clock stops."""
        if self._on:
            self._on = False
            gc.callbacks.remove(self._tick)
        return self.collections, self.ns

    def _tick(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter_ns()
        else:
            self.collections += 1
            self.ns += time.perf_counter_ns() - self._began


def _involuntary_switches() -> int:
    """This process's involuntary context switches so far (it was made to give up a core)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw)


def _last_cpu() -> int | None:
    """The core this process last ran on (Linux: /proc/self/stat); None elsewhere."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[36]) if len(fields) > 36 else None  # field 39, counted from 1


def _progress(c: Collector, elapsed_ns: int) -> list[int]:
    """A `Progress` as plain numbers."""
    return [elapsed_ns, c.issued, c.finished, c.in_flight, sum(c.errors_by_kind.values())]
