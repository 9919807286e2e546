"""The one wiring around a run: monitors, energy meter, server scraper, started and stopped once.

Every path uses it (a single process, the driver of several workers, the MLPerf drop-in):

    with RunWatch(plan, sut, monitors) as watch:    # opens the meter, makes the scraper
        outcome = run_session(plan, sut, watch=watch)  # or run_workers(..., watch)
        result = judge(plan, outcome, server=watch.server())
        watch.finish(result)                          # what the monitors are told at the end

The run makes four calls (`Watch`), in this order, at moments only it knows: `idle`
once the SUT is up (the meter's idle baseline: slow), `started` before the start is set
and the first query goes out (the scraper, then each monitor on the live figures, each
`EnergyWatcher` handed the meter and each `ServerWatcher` the scraper), `go` as the run
starts (the meter samples), `ended` when it stops. With several workers the driver makes
them before it measures the clocks and sets T0, so nothing slow delays the release.
Leaving the block stops whatever still runs, even when the run raised: the meter, the
scraper, and each monitor that started (told the result, or None when the run failed);
a monitor that fails to stop is reported and the others are still told.

A monitor is told the run's result; this stage comes before the result's, so `Monitor`
is generic in it (`loadgen.api.Monitor` is `Monitor[RunResult]`).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import TracebackType
from typing import Generic, Protocol, Self, TypeVar, runtime_checkable

from loadgen.adapters.httpbase import http_auth, http_base
from loadgen.plan.plan import RunPlan
from loadgen.record.energy import EnergyMeter, EnergyTrace, open_meter
from loadgen.record.scrape import ScrapeTrace, ServerScraper
from loadgen.record.watched import Named, Watched

__all__ = ["EnergyWatcher", "Monitor", "RunWatch", "ServerWatcher", "Watch", "scraper_for"]

ResultT = TypeVar("ResultT")
ResultT_contra = TypeVar("ResultT_contra", contravariant=True)


class Monitor(Protocol[ResultT_contra]):
    """Watches a run live (for example the Prometheus exporter); never on the hot path."""

    def start(self, plan: RunPlan, sut: Named, figures: Watched) -> None:
        """Called after the SUT started, before the first query, on the run's thread, with
        the SUT (or what stands for it: its `name`) and the live figures."""

    def stop(self, result: ResultT_contra | None) -> None:
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


class Watch(Protocol):
    """The run's side of the wiring: what a session, or the driver, calls (see above)."""

    @property
    def watched(self) -> bool:
        """Whether any monitor reads the live figures (else the driver keeps no merged view)."""

    def idle(self) -> None:
        """The SUT is up: the slow readings first (blocks; a session runs it off its loop)."""

    def started(self, sut: Named, figures: Watched) -> None:
        """Before the start is set, on the run's thread: the scraper and the monitors."""

    def go(self) -> None:
        """The run starts now: the meter samples."""

    def ended(self) -> EnergyTrace | None:
        """The run stopped: the meter stops; what it read (None without a meter)."""


def _meter(plan: RunPlan) -> EnergyMeter | None:
    """The energy meter the plan's `energy` setting asks for (None when "off")."""
    s = plan.settings
    return open_meter(s.energy, s.energy_sample_hz, s.energy_idle_s)


def scraper_for(plan: RunPlan, sut: object) -> ServerScraper | str | None:
    """The scraper `server_metrics` asks for: None when "off"; a reason when "auto" finds no
    HTTP endpoint in `sut` (an adapter or a SPEC string)."""
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


class RunWatch(Generic[ResultT]):
    """What watches one run of `plan` against `sut` (an adapter or a SPEC), started and
    stopped around it; see the module docstring. The run's side is `Watch`."""

    def __init__(self, plan: RunPlan, sut: object,
                 monitors: Sequence[Monitor[ResultT]] = ()) -> None:
        self.plan = plan
        self._sut = sut
        self._monitors = tuple(monitors)
        self.meter: EnergyMeter | None = None
        self._scraper: ServerScraper | str | None = None
        self._scraping = False
        self._scraped: ScrapeTrace | None = None
        self._sampling = False
        self._started: list[Monitor[ResultT]] = []
        self._result: ResultT | None = None

    def __enter__(self) -> Self:
        self.meter = _meter(self.plan)
        self._scraper = scraper_for(self.plan, self._sut)
        return self

    # -- the run's side (`Watch`) ---------------------------------------------------------

    @property
    def watched(self) -> bool:
        """Whether any monitor reads the live figures."""
        return bool(self._monitors)

    def idle(self) -> None:
        """The meter's idle baseline (`energy_idle_s` of readings, in this thread)."""
        if self.meter is not None:
            self.meter.idle()

    def started(self, sut: Named, figures: Watched) -> None:
        """The scraper's first scrape and its thread, then each monitor (handed the meter
        and the scraper when it watches them)."""
        scraper = self._scraper
        if isinstance(scraper, ServerScraper):
            scraper.start()
            self._scraping = True
        for monitor in self._monitors:
            monitor.start(self.plan, sut, figures)
            self._started.append(monitor)
            if self.meter is not None and isinstance(monitor, EnergyWatcher):
                monitor.watch_energy(self.meter)
            if isinstance(scraper, ServerScraper) and isinstance(monitor, ServerWatcher):
                monitor.watch_server(scraper)

    def go(self) -> None:
        """The meter's first reading now, then its sampling thread."""
        if self.meter is not None:
            self.meter.start()
            self._sampling = True

    def ended(self) -> EnergyTrace | None:
        """Stop the meter: every reading (None without a meter, or when it never started)."""
        if self.meter is None or not self._sampling:
            return None
        self._sampling = False
        return self.meter.stop()

    # -- the caller's side ----------------------------------------------------------------

    def server(self) -> ScrapeTrace | str | None:
        """Stop the scraper (once): what it read; why none was read; None when "off"."""
        scraper = self._scraper
        if not isinstance(scraper, ServerScraper):
            return scraper
        if self._scraped is None or self._scraping:
            self._scraped, self._scraping = scraper.stop(), False
        return self._scraped

    def finish(self, result: ResultT) -> None:
        """The run's result, told to the monitors as the block ends."""
        self._result = result

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            self.ended()
            if self.meter is not None:
                self.meter.close()
            if self._scraping:
                self.server()
        finally:
            for monitor in self._started:
                try:
                    monitor.stop(self._result)
                except Exception as error:  # noqa: BLE001 - after the run: report, lose nothing
                    print(f"loadgen: warning: monitor {type(monitor).__name__} failed: "
                          f"{error!r}", file=sys.stderr)
            self._started.clear()
