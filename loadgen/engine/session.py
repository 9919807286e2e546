"""One run session: the SUT up, the plan walked, the SUT down, a tally out.

Everything a run does between its plan and its figures happens here, once:
build the collector, start the SUT, take Ctrl-C and SIGTERM, keep the garbage collector
off what is already loaded, open the query log, run the engine, stop the SUT
and score accuracy. The single-process path (`loadgen.api`) and each load
process (`engine.workers.processes`) call `run_session`; they differ only in their
`share` of the plan and in a `gate` that holds the start until every process
is ready.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from loadgen.adapters.base import SystemUnderTest
from loadgen.adapters.safetext import safe_tree
from loadgen.engine.runner import Runner
from loadgen.engine.watch import Watch
from loadgen.errors import SutError
from loadgen.plan.jobs import JobBook
from loadgen.plan.plan import RunPlan
from loadgen.plan.qsl import accuracy_queries
from loadgen.plan.schedule import share_queries
from loadgen.plan.settings import IssueMode
from loadgen.record.collect import Collector
from loadgen.record.energy import EnergyTrace
from loadgen.record.hostload import HostLoad, host_load, sample_host
from loadgen.record.jobs import JobRecorder
from loadgen.record.progress import Progress
from loadgen.record.querylog import QueryLog
from loadgen.record.tally import Accuracy, Tally
from loadgen.record.tokens import TokenRecorder
from loadgen.record.windows import Windows

__all__ = ["INTERRUPTS", "Gate", "SessionOutcome", "Share", "new_collector", "run_loop", "run_session"]

T = TypeVar("T")

INTERRUPTS = (signal.SIGINT, signal.SIGTERM)
"""Signals that stop a run as Ctrl-C does: it drains and writes a partial result; a second
one stops the drain."""

Gate = Callable[[dict[str, Any], int | None], Awaitable[int]]
"""Given the ready SUT's description and the first query's offset from the start (ns; None
without a schedule), waits and returns the start time (perf_counter ns)."""


@dataclass(frozen=True, slots=True)
class Share:
    """Load process `index` of `count` issues its share of the plan (`share_queries`)."""

    index: int = 0
    count: int = 1


@dataclass(frozen=True, slots=True)
class SessionOutcome:
    """What one session measured."""

    tally: Tally
    sut: dict[str, Any]  # the SUT's own description
    accuracy: Accuracy | None  # accuracy mode only
    cpu_s: float  # this process's CPU time while the engine ran
    energy: EnergyTrace | None = None  # the energy readings, when a meter ran
    host_load: HostLoad | None = None  # what the rest of the host did while the engine ran
    plan_s: tuple[float, float] = (0.0, 0.0)  # planning the schedule: in all, while it ran


def new_collector(plan: RunPlan) -> Collector:
    """The completion sink a plan asks for."""
    bound = plan.slo_bound_ns
    token_run = plan.prompts is not None or plan.token_targets.any or plan.goodput_slos.any
    return Collector(bound, plan.query_timeout_ns,
                     keep_outputs=plan.issue_mode is IssueMode.ACCURACY,
                     windows=Windows(plan.window_ns, bound, plan.step_starts_ns),
                     tokens=TokenRecorder(plan.goodput_slos, plan.token_targets)
                     if token_run else None,
                     jobs=JobRecorder(plan.job_deadline_ns)
                     if isinstance(plan.prompts, JobBook) else None)


async def _preflight(sut: SystemUnderTest) -> None:
    """The SUT's one check request before the run, when it has one (see adapters.preflight);
    a failure stops the SUT and fails the run before its first query."""
    preflight = getattr(sut, "preflight", None)
    if preflight is None:
        return
    try:
        await preflight()
    except BaseException:
        await sut.stop()
        raise


async def run_session(plan: RunPlan, sut: SystemUnderTest, *, share: Share = Share(),
                      progress: Callable[[Progress], None] | None = None,
                      log_dir: Path | None = None,
                      started: Callable[[Collector], None] | None = None,
                      gate: Gate | None = None,
                      watch: Watch | None = None,
                      interrupts: Callable[[Callable[[], None]], None] | None = None,
                      release_gil: bool = False, glance_every: int = 1) -> SessionOutcome:
    """Run one plan (or one share of it) against a SUT on the running loop.

    `started` sees the collector once the SUT has started (a load worker's own reports);
    `interrupts` is handed the run's Ctrl-C (for a worker off the main thread);
    `release_gil` waits without the GIL, as for a SUT that `shares_gil` (for a
    worker whose host runs threads of its own, as a Ray actor does); every
    `glance_every`-th progress tick carries a `Glance` (the rest None);
    with `log_dir` every query's stamps stream to the query log there; a `watch`
    (`engine.watch`: monitors, meter, scraper) takes its slow readings once the SUT is up,
    starts its monitors on the collector, and its meter samples while the engine runs.
    """
    collector = new_collector(plan)
    queries, ids = share_queries(plan, share.index, share.count)
    runner = Runner(plan, sut, collector, *queries, progress, ids=ids, release_gil=release_gil,
                    share=(share.index, share.count), glance_every=glance_every)
    collector.on_finish = runner.query_finished
    use_prompts = getattr(sut, "use_prompts", None)
    if plan.prompts is not None and use_prompts is not None:
        use_prompts(plan.prompts)
    if interrupts is not None:
        interrupts(runner.interrupt)
    try:
        await sut.start(collector, runner)
    except Exception as exc:
        raise SutError(f"SUT {sut.name!r} failed to start: {exc}") from exc
    await _preflight(sut)
    loop = asyncio.get_running_loop()
    for signum in INTERRUPTS:  # SIGTERM (timeout, docker stop, a CI cancel) as Ctrl-C is
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # main only
            loop.add_signal_handler(signum, _interrupt, runner, plan)
    trace = None
    try:
        if watch is not None:
            await asyncio.to_thread(watch.idle)
            watch.started(sut, collector)
        if started is not None:
            started(collector)
        runner.plan_ahead()  # before the gate, so planning does not eat a shared start
        gc.collect()
        gc.freeze()  # what is loaded now (models, arrays) is never scanned mid-run
        if log_dir is not None:
            collector.log = QueryLog(log_dir)
        start_at = None if gate is None else await gate(sut.describe(), runner.first_offset_ns)
        if watch is not None:
            watch.go()
        cpu_s, host_before, planned_ns = time.process_time(), sample_host(), runner.plan_ns
        times = await runner.run(start_at_ns=start_at)
        cpu_s, host = time.process_time() - cpu_s, host_load(host_before, sample_host())
        plan_s = (runner.plan_ns / 1e9, (runner.plan_ns - planned_ns) / 1e9)
    finally:
        if watch is not None:
            trace = watch.ended()
        gc.unfreeze()
        if collector.log is not None:
            try:
                collector.log.close()
            except Exception as exc:  # noqa: BLE001 - queries.csv is derived: lose not the run
                print(f"loadgen: warning: the query log's CSV failed: {exc!r}", file=sys.stderr)
        for signum in INTERRUPTS:
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(signum)
        await sut.stop()
    described = safe_tree(sut.describe())  # may hold text a server gave (metadata)
    return SessionOutcome(collector.tally(times), described, _score(plan, sut, collector),
                          cpu_s, trace, host, plan_s)


def _interrupt(runner: Runner, plan: RunPlan) -> None:
    """A signal to stop: say what happens next (the drain, or its end) and tell the runner."""
    if runner.stopping:
        print("loadgen: interrupted again: not waiting for the rest", file=sys.stderr,
              flush=True)
    else:
        print(f"loadgen: interrupted: waiting up to {plan.drain_timeout_ns / 1e9:g} s for "
              "what is in flight; interrupt again to stop waiting", file=sys.stderr, flush=True)
    runner.interrupt()


def _score(plan: RunPlan, sut: SystemUnderTest, collector: Collector) -> Accuracy | None:
    """An accuracy run's score, by the SUT's own `score` (value None when it has none)."""
    if plan.issue_mode is not IssueMode.ACCURACY:
        return None
    score = getattr(sut, "score", None)
    if score is None or collector.outputs is None:
        return Accuracy(None, 0)
    value, samples = score(accuracy_queries(plan.library, plan.samples_per_query),
                           collector.outputs)
    return Accuracy(float(value), int(samples))


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop where available, else stock asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)
