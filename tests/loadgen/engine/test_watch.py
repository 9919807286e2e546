"""The one wiring around a run (`engine.watch.RunWatch`): what starts in which order, on a
single-process session and on the driver of several workers, and what stops when a run
raises."""

from __future__ import annotations

import time

import pytest

from loadgen.adapters.null import NullSut
from loadgen.engine.session import run_loop, run_session
from loadgen.engine.watch import RunWatch, scraper_for
from loadgen.engine.workers.base import STARTED, Placement
from loadgen.engine.workers.driver import run_workers
from loadgen.engine.workers.live import LiveView
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import load_settings
from loadgen.record.collect import Collector
from loadgen.record.scrape import ScrapeTrace, ServerScraper
from tests.loadgen.fakes import empty_done

DEV = ["preset='dev'", "target_latency_ms=50", "min_duration_s=0.2", "min_query_count=20",
       "target_qps=500", "warmup_s=0.05", "max_issue_lag_ms=1000"]


class Events(list[tuple[str, int]]):
    """What happened, in order, each with its perf_counter_ns stamp."""

    def note(self, what: str) -> None:
        self.append((what, time.perf_counter_ns()))

    def names(self) -> list[str]:
        return [what for what, _ in self]

    def at(self, what: str) -> int:
        return next(ns for name, ns in self if name == what)


class FakeMeter:
    """An energy meter noting each step (no devices read)."""

    def __init__(self, events: Events) -> None:
        self.events, self.closed, self.running = events, False, False

    def idle(self) -> None:
        self.events.note("meter.idle")

    def start(self) -> None:
        self.events.note("meter.start")
        self.running = True

    def stop(self) -> None:
        self.events.note("meter.stop")
        self.running = False
        self.close()

    def close(self) -> None:
        self.closed = True

    def latest(self) -> tuple[()]:
        return ()


class FakeMonitor:
    """A monitor watching the meter and the scraper too, noting each call."""

    def __init__(self, events: Events, name: str = "monitor", fail_stop: bool = False) -> None:
        self.events, self.name, self.fail_stop = events, name, fail_stop
        self.figures: object = None
        self.sut: object = None
        self.stopped_with: list[object] = []

    def start(self, plan: RunPlan, sut: object, figures: object) -> None:
        self.events.note(f"{self.name}.start")
        self.sut, self.figures = sut, figures

    def watch_energy(self, meter: object) -> None:
        self.events.note(f"{self.name}.watch_energy")

    def watch_server(self, scraper: object) -> None:
        self.events.note(f"{self.name}.watch_server")

    def stop(self, result: object) -> None:
        self.events.note(f"{self.name}.stop")
        self.stopped_with.append(result)
        if self.fail_stop:
            raise RuntimeError("the exporter's push failed")


@pytest.fixture
def events(monkeypatch: pytest.MonkeyPatch) -> Events:
    """Every run's meter is a `FakeMeter` and its scraper reads a fake endpoint (each read
    noted); the scraper's interval is long enough that only start and stop read it."""
    noted = Events()
    monkeypatch.setattr("loadgen.engine.watch._meter", lambda plan: FakeMeter(noted))

    def fetch(url: str, timeout_s: float) -> str:
        noted.note("scrape")
        return "served_requests_total 1\n"

    monkeypatch.setattr("loadgen.engine.watch.scraper_for",
                        lambda plan, sut: ServerScraper("http://127.0.0.1:1/metrics", 3600.0,
                                                        fetch=fetch))
    return noted


def _plan(*more: str) -> RunPlan:
    return RunPlan.of(load_settings(None, [*DEV, *more]))


def test_a_session_takes_the_idle_reading_then_starts_scraper_monitors_and_meter_in_order(
        events: Events) -> None:
    plan, sut = _plan(), NullSut()
    monitor = FakeMonitor(events)
    with RunWatch(plan, sut, [monitor]) as watch:
        outcome = run_loop(run_session(plan, sut, watch=watch))
        events.note("run returned")
        trace = watch.server()
        assert isinstance(trace, ScrapeTrace) and len(trace.scrapes) == 2  # at start, at stop
        assert watch.server() is trace  # stopped once
        watch.finish("the result")
        assert monitor.stopped_with == []  # told only as the block ends
    assert events.names() == [
        "meter.idle", "scrape", "monitor.start", "monitor.watch_energy", "monitor.watch_server",
        "meter.start", "meter.stop", "run returned", "scrape", "monitor.stop"]
    start_ns = outcome.tally.times.start_ns
    assert events.at("meter.idle") < events.at("monitor.start") < events.at("meter.start") \
        <= start_ns < events.at("meter.stop")
    assert isinstance(monitor.figures, Collector) and monitor.sut is sut
    assert monitor.stopped_with == ["the result"]
    assert watch.meter is not None and watch.meter.closed


def test_the_driver_starts_everything_slow_before_it_measures_a_clock_or_releases(
        events: Events) -> None:
    plan = _plan("workers=2")
    monitor = FakeMonitor(events)
    engine = _Engine(events, count=2)
    with RunWatch(plan, "null", [monitor]) as watch:
        spread = run_workers(plan, "null", engine, watch=watch)
        watch.finish("merged")
    names = events.names()
    slow = ["meter.idle", "scrape", "monitor.start", "monitor.watch_energy",
            "monitor.watch_server", "meter.start"]
    assert names[:len(slow)] == slow
    first_clock, first_release = names.index("clock"), names.index("release")
    assert len(slow) == first_clock < first_release
    assert names.index("meter.stop") > max(i for i, n in enumerate(names) if n == "release")
    assert isinstance(monitor.figures, LiveView) and monitor.sut is monitor.figures
    assert monitor.figures.name == "fake"
    assert monitor.stopped_with == ["merged"]
    assert spread.outcome.energy is None  # the fake meter's stop returns no trace


def test_without_monitors_the_driver_keeps_no_merged_view(events: Events) -> None:
    plan = _plan("workers=2")
    with RunWatch(plan, "null") as watch:
        assert not watch.watched
        run_workers(plan, "null", _Engine(events, count=2), watch=watch)
    assert "meter.idle" in events.names() and "meter.start" in events.names()


def test_a_run_that_raises_still_stops_the_meter_the_scraper_and_every_started_monitor(
        events: Events, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan()
    failing, other = FakeMonitor(events, "failing", fail_stop=True), FakeMonitor(events, "other")
    with pytest.raises(RuntimeError, match="the SUT fell over"), \
            RunWatch(plan, NullSut(), [failing, other]) as watch:
        watch.idle()
        watch.started(NullSut(), Collector(10**9))
        watch.go()
        raise RuntimeError("the SUT fell over")
    meter = watch.meter
    assert isinstance(meter, FakeMeter) and not meter.running and meter.closed
    assert events.names()[-4:] == ["meter.stop", "scrape", "failing.stop", "other.stop"]
    assert failing.stopped_with == [None] and other.stopped_with == [None]
    assert "monitor FakeMonitor failed: RuntimeError(\"the exporter's push failed\")" in \
        capsys.readouterr().err


def test_a_run_that_fails_before_its_start_stops_no_monitor_and_closes_the_meter(
        events: Events) -> None:
    monitor = FakeMonitor(events)
    with pytest.raises(RuntimeError), RunWatch(_plan(), NullSut(), [monitor]) as watch:
        raise RuntimeError("the SUT did not start")
    assert monitor.stopped_with == [] and "scrape" not in events.names()
    assert isinstance(watch.meter, FakeMeter) and watch.meter.closed
    assert "meter.stop" not in events.names()  # never sampled: nothing to stop


def test_the_scraper_follows_server_metrics() -> None:
    assert scraper_for(_plan(), NullSut()) is None
    assert scraper_for(_plan("server_metrics='auto'"), NullSut()) == (
        "server_metrics = auto: the SUT is not an HTTP endpoint; give a URL")
    auto = scraper_for(_plan("server_metrics='auto'"), "http://127.0.0.1:9/model")
    assert isinstance(auto, ServerScraper) and auto.url == "http://127.0.0.1:9/metrics"
    given = scraper_for(_plan("server_metrics='http://127.0.0.1:9/m'"), NullSut())
    assert isinstance(given, ServerScraper) and given.url == "http://127.0.0.1:9/m"


def test_energy_off_opens_no_meter_and_the_run_has_no_trace() -> None:
    plan = _plan("energy='off'")
    with RunWatch(plan, NullSut()) as watch:
        outcome = run_loop(run_session(plan, NullSut(), watch=watch))
        assert watch.server() is None
    assert watch.meter is None and outcome.energy is None


class _Worker:
    """A fake worker: exact clock, released at its deadline, ends with an empty tally;
    its first clock reading and its release are noted."""

    def __init__(self, index: int, plan: RunPlan, events: Events) -> None:
        self.index, self.label, self.plan, self.events = index, f"fake {index}", plan, events
        self.deadline_ns: int | None = None
        self.clocked = False

    def placement(self) -> Placement:
        return Placement("host", "node")

    def wait_ready(self, timeout_s: float) -> dict[str, str]:
        return {"sut": "fake"}

    def clock(self) -> int:
        if not self.clocked:
            self.clocked = True
            self.events.note("clock")
        return time.perf_counter_ns()

    def release(self, deadline_ns: int) -> None:
        self.events.note("release")
        self.deadline_ns = deadline_ns

    def messages(self) -> list[tuple[str, dict[str, object]]]:
        assert self.deadline_ns is not None
        return [(STARTED, {"start_slack_ns": 1}), empty_done(self.plan, self.deadline_ns)]

    def interrupt(self) -> None:
        pass


class _Engine:
    name = "fake"

    def __init__(self, events: Events, count: int) -> None:
        self.events, self.count = events, count

    def start(self, plan: RunPlan, spec: str, out_dir: object) -> list[_Worker]:
        return [_Worker(i, plan, self.events) for i in range(self.count)]

    def wait(self, workers: object, timeout_s: float) -> None:
        pass

    def describe(self) -> dict[str, object]:
        return {"engine": self.name, "version": None, "nodes": 1}

    def close(self) -> None:
        pass
