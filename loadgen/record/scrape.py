"""The server-metrics scraper: a thread reading an endpoint's Prometheus `/metrics`, off the
issue path.

`ServerScraper(url, interval_s, headers=...)` mirrors the energy meter: `start()` takes a first scrape in
the calling thread (so the span opens before the run's clock does) and starts the thread,
which scrapes every `interval_s`; `stop()` takes a last scrape and returns the
`ScrapeTrace`: every scrape stamped on the engine's clock (`perf_counter_ns`, halfway through
the request), parsed with prometheus-client's text parser, so the judge can cut it to the
measured window afterwards. A scrape that fails (refused, timed out, not Prometheus text)
is counted with its reason and never raises: the run goes on. Pacing is a wait on the stop
event, so `stop()` ends the thread at once.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["MAX_SCRAPE_BYTES", "Sample", "Scrape", "ScrapeTrace", "ServerScraper", "parse_scrape"]

MAX_SCRAPE_BYTES = 32 * 1024 * 1024
"""A /metrics body longer than this is refused (an endpoint is not trusted to be small)."""

Sample = tuple[str, str, tuple[tuple[str, str], ...]]
"""(family name, sample name, sorted labels) of one series."""


@dataclass(frozen=True, slots=True)
class Scrape:
    """One parsed scrape: its stamp and every sample's value."""

    t_ns: int
    values: dict[Sample, float]


@dataclass(frozen=True, slots=True)
class ScrapeTrace:
    """A run's scrapes of `url`, the family types seen, and the failures with their reasons."""

    url: str
    interval_s: float
    scrapes: tuple[Scrape, ...]
    types: dict[str, str] = field(default_factory=dict)  # family -> counter, gauge, histogram...
    failures: int = 0
    errors: tuple[str, ...] = ()  # the distinct reasons, first seen first (at most 5)


def parse_scrape(text: str) -> tuple[dict[Sample, float], dict[str, str]]:
    """Samples and family types of Prometheus text (ValueError when it is not that format)."""
    values: dict[Sample, float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for sample in family.samples:
            labels = tuple(sorted(sample.labels.items()))
            values[(family.name, sample.name, labels)] = float(sample.value)
    return values, types


def _fetch(url: str, timeout_s: float, headers: dict[str, str] | None = None) -> str:
    request = urllib.request.Request(url, headers={"Accept": "text/plain", **(headers or {})})
    with urllib.request.urlopen(request, timeout=timeout_s) as response:
        body = response.read(MAX_SCRAPE_BYTES + 1)
    if len(body) > MAX_SCRAPE_BYTES:
        raise ValueError(f"the body is over {MAX_SCRAPE_BYTES} bytes")
    return str(body.decode("utf-8"))


class ServerScraper:
    """Scrapes `url` every `interval_s` on its own thread, from `start()` to `stop()`."""

    def __init__(self, url: str, interval_s: float = 1.0,
                 fetch: Callable[[str, float], str] | None = None,
                 headers: dict[str, str] | None = None) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be above 0, got {interval_s!r}")
        self.url = url
        self.interval_s = interval_s
        sent = dict(headers or {})
        self._fetch = fetch or (lambda u, t: _fetch(u, t, sent))
        self._timeout_s = min(max(interval_s, 0.5), 5.0)
        self._clock = time.perf_counter_ns
        self._halt = threading.Event()
        self._thread: threading.Thread | None = None
        self._scrapes: list[Scrape] = []
        self._types: dict[str, str] = {}
        self._failures = 0
        self._errors: list[str] = []

    def latest(self) -> Scrape | None:
        """The last good scrape (None before the first); any thread may call."""
        scrapes = self._scrapes
        return scrapes[-1] if scrapes else None

    @property
    def types(self) -> dict[str, str]:
        """The family types seen so far (family -> counter, gauge, histogram, ...)."""
        return dict(self._types)

    def scrape(self) -> None:
        """One scrape now, in this thread: kept, or counted as failed with its reason."""
        before = self._clock()
        try:
            values, types = parse_scrape(self._fetch(self.url, self._timeout_s))
        except (OSError, ValueError, UnicodeDecodeError) as exc:  # URLError, HTTPError, timeouts
            self._failed(exc)
            return
        if not values:
            self._failed(ValueError("no samples (not Prometheus text?)"))
            return
        self._types.update(types)
        self._scrapes.append(Scrape((before + self._clock()) // 2, values))

    def _failed(self, exc: BaseException) -> None:
        self._failures += 1
        reason = f"{type(exc).__name__}: {exc}"
        if reason not in self._errors and len(self._errors) < 5:
            self._errors.append(reason)

    def _pace(self) -> None:
        period = self.interval_s
        while not self._halt.wait(period):
            self.scrape()

    def start(self) -> None:
        """A first scrape now, then the thread."""
        if self._thread is not None:
            return
        self.scrape()
        self._thread = threading.Thread(target=self._pace, name="loadgen-scrape", daemon=True)
        self._thread.start()

    def stop(self) -> ScrapeTrace:
        """Stop (one last scrape closes the span) and return everything scraped."""
        if self._thread is not None:
            self._halt.set()
            self._thread.join()
            self._thread = None
            if self._scrapes:  # a dead endpoint is not waited on once more
                self.scrape()
        return ScrapeTrace(self.url, self.interval_s, tuple(self._scrapes), dict(self._types),
                           self._failures, tuple(self._errors))
