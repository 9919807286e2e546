"""The public run API: settings + SUT in, result out. The CLI, sweeps and searches call this."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

from loadgen.adapters.base import SystemUnderTest
from loadgen.record.collect import Collector
from loadgen.errors import SettingsError, SutError
from loadgen.plan.qsl import accuracy_queries
from loadgen.record.querylog import QueryLog
from loadgen.report.environment import environment
from loadgen.report.result import build_result, write_result
from loadgen.report.summary import write_summary
from loadgen.engine.runner import Progress, Runner
from loadgen.plan.schedule import (
    describe_schedule,
    is_open_loop,
    library,
    plan_queries,
    save_schedule,
)
from loadgen.plan.settings import TestSettings
from loadgen.judge.stats import summarize
from loadgen.judge.verdict import evaluate
from loadgen.record.windows import windows_for

__all__ = ["Monitor", "print_progress", "run_async", "run_loop", "run_test", "save_run"]

T = TypeVar("T")


def _accuracy(settings: TestSettings, sut: SystemUnderTest,
              collector: Collector) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    score = getattr(sut, "score", None)
    if settings.mode != "accuracy":
        return None, ()
    if score is None or collector.outputs is None:
        return None, (f"accuracy mode: SUT {sut.name!r} cannot score its outputs",)
    queries = accuracy_queries(library(settings), settings.samples_per_query)
    value, samples = score(queries, collector.outputs)
    figures = {"value": value, "target": settings.accuracy_target, "samples": samples}
    if value < settings.accuracy_target:
        reason = f"accuracy {value:.4f} is below accuracy_target {settings.accuracy_target:g}"
        return figures, (reason,)
    return figures, ()


class Monitor(Protocol):
    """Watches a run live (for example the Prometheus exporter); never on the hot path."""

    def start(self, settings: TestSettings, sut: SystemUnderTest, collector: Collector) -> None:
        """Called after the SUT started, before the first query."""

    def stop(self, result: dict[str, Any] | None) -> None:
        """Called once the run ended (result is None if it failed)."""


async def run_async(settings: TestSettings, sut: SystemUnderTest,
                    progress: Callable[[Progress], None] | None = None,
                    monitors: Sequence[Monitor] = (),
                    log_dir: Path | None = None,
                    warnings: Sequence[str] = ()) -> dict[str, Any]:
    """Run one test against a SUT on the running loop; returns the result document.

    With `log_dir`, every query's stamps stream to the per-query log there;
    `warnings` (found before the run) join the verdict's.
    """
    if settings.workers > 1:
        raise SettingsError([(f"workers: {settings.workers} load processes need a SUT spec: "
                              "use loadgen.engine.processes.run_workers (or `loadgen run --workers`)")])
    slo_ns = int(settings.target_latency_ms * 1e6) or 2**62
    collector = Collector(slo_ns, int(settings.query_timeout_ms * 1e6),
                          keep_outputs=settings.mode == "accuracy",
                          windows=windows_for(settings, slo_ns))
    offsets, samples = plan_queries(settings)
    runner = Runner(settings, sut, collector, offsets, samples, progress)
    collector.on_finish = runner.query_finished
    try:
        await sut.start(collector, runner)
    except Exception as exc:
        raise SutError(f"SUT {sut.name!r} failed to start: {exc}") from exc
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, runner.interrupt)
    for monitor in monitors:
        monitor.start(settings, sut, collector)
    gc.collect()
    gc.freeze()  # what is loaded now (models, arrays) is never scanned mid-run
    if log_dir is not None:
        collector.log = QueryLog(log_dir)
    try:
        times = await runner.run()
    finally:
        gc.unfreeze()
        if collector.log is not None:
            collector.log.close()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)
        await sut.stop()
    stats = summarize(settings, collector.tally(), times)
    accuracy, extra = _accuracy(settings, sut, collector)
    verdict = evaluate(settings, stats, extra, tuple(warnings))
    result = build_result(settings, stats, verdict, sut.describe(), environment(),
                          {"schedule": describe_schedule(settings)}
                          | ({"accuracy": accuracy} if accuracy is not None else {}))
    for monitor in monitors:
        monitor.stop(result)
    return result


def run_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on uvloop where available, else stock asyncio."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


def run_test(settings: TestSettings, sut: SystemUnderTest, out_dir: Path | None = None,
             progress: Callable[[Progress], None] | None = None,
             monitors: Sequence[Monitor] = (),
             warnings: Sequence[str] = ()) -> dict[str, Any]:
    """Run one test to completion; with `out_dir`, write result.json and summary.txt there."""
    result = run_loop(run_async(settings, sut, progress, monitors, out_dir, warnings))
    if out_dir is not None:
        save_run(settings, result, out_dir)
    return result


def save_run(settings: TestSettings, result: dict[str, Any], out_dir: Path) -> None:
    """Write the run directory: schedule.bin (open loop), result.json, summary.txt."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if is_open_loop(settings):
        result["schedule"] |= save_schedule(settings, out_dir)
    write_result(out_dir, result)
    write_summary(out_dir, result)


def print_progress(p: Progress) -> None:
    """A one-line progress report on stderr."""
    rate = p.finished / (p.elapsed_ns / 1e9) if p.elapsed_ns else 0.0
    print(f"[{p.elapsed_ns / 1e9:7.1f}s] issued {p.issued}  done {p.finished}  "
          f"in flight {p.in_flight}  errors {p.errors}  ({rate:.0f}/s)", file=sys.stderr)
