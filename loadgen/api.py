"""The public run API: settings + SUT in, a typed result out. The CLI and campaigns call this.

One path for every run: the settings are planned once (`RunPlan`), a session
runs the plan (with `server_metrics`, the endpoint's /metrics scraped beside it) (in this process, or in `settings.workers` load workers from a
SUT spec: local processes, or Ray actors), the tally is summarized and judged
(with the workers' clocks and losses), and the result is built and,
with an output directory, written.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

from loadgen.adapters.base import SystemUnderTest
from loadgen.adapters.httpbase import http_auth, http_base
from loadgen.engine.session import SessionOutcome, run_loop, run_session
from loadgen.engine.workers.base import WORKERS_DIR, Engine
from loadgen.engine.workers.driver import run_workers
from loadgen.engine.workers.live import LiveView
from loadgen.engine.workers.processes import LocalProcesses, merge_logs
from loadgen.errors import SettingsError
from loadgen.judge.distributed import cost_warnings, distributed_verdict
from loadgen.judge.energy import EnergyFigures, energy_figures, output_tokens_of
from loadgen.judge.servermetrics import ServerMetrics, server_metrics, server_warnings
from loadgen.judge.stats import RunStats, measured_window_ns, summarize
from loadgen.judge.verdict import evaluate, headline
from loadgen.plan.plan import RunPlan
from loadgen.plan.schedule import describe_schedule, save_schedule
from loadgen.plan.settings import TestSettings
from loadgen.plan.tracefile import SCHEDULE_FILE
from loadgen.record.collect import Collector
from loadgen.record.energy import EnergyMeter, open_meter
from loadgen.record.memory import in_process_memory, remote_memory
from loadgen.record.progress import Progress
from loadgen.record.provenance import probe_endpoint
from loadgen.record.scrape import ScrapeTrace, ServerScraper
from loadgen.report.environment import environment
from loadgen.report.result import RunResult, write_result
from loadgen.report.summary import SUMMARY_FILE, write_summary

__all__ = ["EnergyWatcher", "Monitor", "ServerWatcher", "judge", "run_async", "run_loop",
           "run_test", "save_run"]


class Monitor(Protocol):
    """Watches a run live (for example the Prometheus exporter); never on the hot path."""

    def start(self, plan: RunPlan, sut: SystemUnderTest, collector: Collector) -> None:
        """Called after the SUT started, before the first query."""

    def stop(self, result: RunResult | None) -> None:
        """Called once the run ended (result is None if it failed)."""


@runtime_checkable
class EnergyWatcher(Protocol):
    """A monitor that also shows the energy meter's latest readings live."""

    def watch_energy(self, meter: EnergyMeter) -> None:
        """Called after `start`, when the run has an energy meter."""


@runtime_checkable
class ServerWatcher(Protocol):
    """A monitor that also re-exports the server's scraped metrics live."""

    def watch_server(self, scraper: ServerScraper) -> None:
        """Called after `start`, when the run scrapes the server's /metrics."""


def judge(plan: RunPlan, outcome: SessionOutcome, warnings: Sequence[str] = (),
          workers: dict[str, object] | None = None,
          distributed: dict[str, Any] | None = None,
          server: ScrapeTrace | str | None = None,
          memory: dict[str, Any] | None = None,
          endpoint: dict[str, Any] | None = None) -> RunResult:
    """Summarize and judge a session's outcome: the run's result. `server` is the scraped
    `/metrics` (or why none was scraped; None with `server_metrics = "off"`); `memory`, an
    in-process SUT's (else the server's gauges give it); `endpoint`, what the endpoint said
    of itself before the run."""
    counted = outcome.sut.get("tokenizer")  # a streaming adapter's own counter, if named
    stats = summarize(plan, outcome.tally, outcome.accuracy,
                      counted if isinstance(counted, str) else None)
    reasons, spread_warnings = ([], []) if distributed is None else distributed_verdict(
        plan, distributed)
    if workers is not None:
        spread_warnings += cost_warnings(workers)
    figures = _server_metrics(plan, outcome, server)
    server_warned = [] if figures is None else server_warnings(figures)
    verdict = evaluate(plan, stats, (*warnings, *spread_warnings, *server_warned),
                       tuple(reasons), outcome.host_load)
    host = {} if outcome.host_load is None else {"host_load": outcome.host_load.as_dict()}
    return RunResult(settings=plan.settings, plan=plan.as_dict(), stats=stats, verdict=verdict,
                     headline=headline(plan, stats), sut=outcome.sut,
                     environment=environment() | host, schedule=describe_schedule(plan),
                     workers=workers, distributed=distributed,
                     energy=_energy(plan, outcome, stats), server_metrics=figures,
                     sut_memory=memory or remote_memory(
                         None if figures is None or figures.source is None
                         else figures.deltas),
                     endpoint=endpoint)


def _server_metrics(plan: RunPlan, outcome: SessionOutcome,
                    server: ScrapeTrace | str | None) -> ServerMetrics | None:
    """The result's `server_metrics`, over the performance figures' own window."""
    s = plan.settings
    if server is None:
        return None
    if isinstance(server, str):
        return ServerMetrics.not_scraped(server, s.server_metrics_interval_s)
    start, end = measured_window_ns(plan, outcome.tally)
    return server_metrics(server, start, end, outcome.tally.times.start_ns,
                          raw=s.server_metrics_raw)


def _scraper(plan: RunPlan, sut: object) -> ServerScraper | str | None:
    """The scraper `server_metrics` asks for: None when "off"; a reason when "auto" finds no
    HTTP endpoint."""
    s = plan.settings
    if s.server_metrics == "off":
        return None
    if s.server_metrics != "auto":  # a URL given: maybe another host, so no SUT credentials
        return ServerScraper(s.server_metrics, s.server_metrics_interval_s)
    base = http_base(sut)
    if base is None:
        return "server_metrics = auto: the SUT is not an HTTP endpoint; give a URL"
    return ServerScraper(f"{base}/metrics", s.server_metrics_interval_s,
                         headers=http_auth(sut))


def _probe(plan: RunPlan, sut: object) -> dict[str, Any] | None:
    """With `endpoint_probe`, what an HTTP SUT says of itself and its baseline round trip."""
    base = http_base(sut) if plan.settings.endpoint_probe else None
    return None if base is None else probe_endpoint(base, headers=http_auth(sut))


def _stop_scraper(scraper: ServerScraper | str | None) -> ScrapeTrace | str | None:
    return scraper.stop() if isinstance(scraper, ServerScraper) else scraper


def _energy(plan: RunPlan, outcome: SessionOutcome, stats: RunStats) -> EnergyFigures:
    """The result's energy block, over the performance figures' own window."""
    if outcome.energy is None:
        why = ('energy = "off" in the settings' if plan.settings.energy == "off"
               else "no energy meter ran on this path")
        return EnergyFigures.not_measured(why)
    start, end = measured_window_ns(plan, outcome.tally)
    return energy_figures(outcome.energy, start, end, queries=stats.queries,
                          samples=stats.samples, qps=stats.qps_completed,
                          samples_per_s=stats.samples_per_s,
                          output_tokens=output_tokens_of(stats.as_dict()))


def _meter(plan: RunPlan) -> EnergyMeter | None:
    s = plan.settings
    return open_meter(s.energy, s.energy_sample_hz, s.energy_idle_s)


async def run_async(settings: TestSettings, sut: SystemUnderTest,
                    progress: Callable[[Progress], None] | None = None,
                    monitors: Sequence[Monitor] = (),
                    log_dir: Path | None = None,
                    warnings: Sequence[str] = ()) -> RunResult:
    """Run one test against a SUT on the running loop, in this process.

    With `log_dir`, every query's stamps stream to the per-query log there;
    `warnings` (found before the run) join the verdict's.
    """
    if settings.workers > 1:
        raise SettingsError([(f"workers: {settings.workers} load processes need a SUT spec, "
                              "not an adapter: pass the spec string to run_test")])
    result = await _run_here(RunPlan.of(settings), sut, progress, monitors, log_dir, warnings)
    _stop_monitors(monitors, result)
    return result


async def _run_here(plan: RunPlan, sut: SystemUnderTest,
                    progress: Callable[[Progress], None] | None, monitors: Sequence[Monitor],
                    log_dir: Path | None, warnings: Sequence[str]) -> RunResult:
    """One plan run in this process, monitors told."""
    meter = _meter(plan)
    endpoint = await asyncio.to_thread(_probe, plan, sut)
    scraper = _scraper(plan, sut)

    def started(collector: Collector) -> None:
        if isinstance(scraper, ServerScraper):
            scraper.start()
        for monitor in monitors:
            monitor.start(plan, sut, collector)
            if meter is not None and isinstance(monitor, EnergyWatcher):
                monitor.watch_energy(meter)
            if isinstance(scraper, ServerScraper) and isinstance(monitor, ServerWatcher):
                monitor.watch_server(scraper)

    try:
        outcome = await run_session(plan, sut, progress=progress, log_dir=log_dir,
                                    started=started, energy=meter)
    finally:
        if meter is not None:
            meter.close()
        scraped = _stop_scraper(scraper)
    in_process = getattr(sut, "shares_gil", False)  # a torch SUT in this very process
    return judge(plan, outcome, warnings, server=scraped,
                 memory=in_process_memory() if in_process else None, endpoint=endpoint)


def _stop_monitors(monitors: Sequence[Monitor], result: RunResult) -> None:
    """Tell each monitor the run ended; one that fails is reported and the rest still told."""
    for monitor in monitors:
        try:
            monitor.stop(result)
        except Exception as exc:  # noqa: BLE001 - after the run: report it, lose nothing
            _report_failure(f"monitor {type(monitor).__name__}", exc)


def _report_failure(what: str, exc: BaseException) -> None:
    print(f"loadgen: warning: {what} failed: {exc!r}", file=sys.stderr)


def run_test(settings: TestSettings | RunPlan, sut: SystemUnderTest | str,
             out_dir: Path | None = None,
             progress: Callable[[Progress], None] | None = None,
             monitors: Sequence[Monitor] = (),
             warnings: Sequence[str] = (),
             engine: Engine | None = None) -> RunResult:
    """Run one test to completion; with `out_dir`, write the run directory there.

    `settings` may be given already planned (`RunPlan.of`). `sut` is an adapter,
    or a `--sut` SPEC string; `settings.workers` load workers need the spec,
    since each builds its own adapter from it. They run as local processes, or
    on `engine` (a `RayEngine`, say) when one is given.
    """
    plan = settings if isinstance(settings, RunPlan) else RunPlan.of(settings)
    settings = plan.settings
    if settings.workers > 1 or engine is not None:
        if not isinstance(sut, str):
            raise SettingsError([(f"workers: {settings.workers} load workers need a SUT spec "
                                  "string (each builds its own adapter)")])
        if engine is not None and not plan.open_loop:
            raise SettingsError([("workers: only open-loop runs (a schedule) spread over "
                                 f"an engine; this one is {plan.issue_mode}")])

        meter = _meter(plan)

        def live(view: LiveView) -> None:  # merged reports, read like a collector
            for monitor in monitors:
                monitor.start(plan, cast(SystemUnderTest, view), cast(Collector, view))
                if meter is not None and isinstance(monitor, EnergyWatcher):
                    monitor.watch_energy(meter)
                if isinstance(scraper, ServerScraper) and isinstance(monitor, ServerWatcher):
                    monitor.watch_server(scraper)

        endpoint = _probe(plan, sut)
        scraper = _scraper(plan, sut)
        if isinstance(scraper, ServerScraper):
            scraper.start()
        try:
            spread = run_workers(plan, sut, engine or LocalProcesses(), out_dir, progress,
                                 live if monitors else None, meter)
        finally:
            if meter is not None:
                meter.close()
            scraped = _stop_scraper(scraper)
        if out_dir is not None and (out_dir / WORKERS_DIR).is_dir():
            merge_logs(out_dir, settings.workers)
        result = judge(plan, spread.outcome, warnings, spread.workers, spread.distributed,
                       scraped, endpoint=endpoint)
    else:
        if isinstance(sut, str):
            from loadgen.adapters.registry import make_sut

            sut = make_sut(sut)
        result = run_loop(_run_here(plan, sut, progress, monitors, out_dir, warnings))
    if out_dir is not None:
        for what, exc in save_run(plan, result, out_dir):
            _report_failure(what, exc)
    _stop_monitors(monitors, result)
    return result


def save_run(plan: RunPlan, result: RunResult,
             out_dir: Path) -> list[tuple[str, Exception]]:
    """Write the run directory: schedule.bin (open loop), result.json, summary.txt.

    result.json is written whatever else fails (atomically, by `write_result`); the saved
    schedule's name, size and sha256 join `result.schedule`. Answers what could not be
    written, with why: (file, exception), each failure leaving the rest written.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    failed: list[tuple[str, Exception]] = []
    if plan.open_loop:
        try:
            result.schedule.update(save_schedule(plan, out_dir))
        except Exception as exc:  # noqa: BLE001 - the schedule regenerates from the seed
            failed.append((SCHEDULE_FILE, exc))
    write_result(out_dir, result)
    try:
        write_summary(out_dir, result)
    except Exception as exc:  # noqa: BLE001 - derived from result.json, already safe
        failed.append((SUMMARY_FILE, exc))
    return failed
