"""The server-metrics scraper: a thread reading an endpoint's Prometheus `/metrics`, off the
issue path.

`ServerScraper(url, interval_s, headers=...)` mirrors the energy meter: `start()` takes a
first scrape in the calling thread (so the span opens before the run's clock does) and
starts the thread, which reads the body every `interval_s`; `stop()` takes a last scrape and
returns the `ScrapeTrace`: every scrape stamped on the engine's clock (`perf_counter_ns`,
halfway through the request), parsed then with prometheus-client's text parser, so the judge
can cut it to the measured window afterwards. A scrape that fails (refused, timed out, not
Prometheus text) is counted with its reason and never raises: the run goes on. Pacing is a
wait on the stop event, so `stop()` ends the thread at once.
"""

from __future__ import annotations

import threading
import time
import urllib.request
import zlib
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
    """Scrapes `url` every `interval_s` on its own thread, from `start()` to `stop()`.

    The thread only reads the body and keeps it zlib-compressed (both release the GIL), so
    the run's event loop does not wait on it; parsing happens at `stop()`, after the run
    (and for `latest()`, in whichever thread asks)."""

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
        self._bodies: list[tuple[int, bytes]] = []  # (stamp, zlib-compressed text)
        self._latest: tuple[int, Scrape | None, dict[str, str]] = (0, None, {})
        self._failures = 0
        self._errors: list[str] = []

    def latest(self) -> Scrape | None:
        """The last body read, parsed (None before the first, or when it is not Prometheus
        text); any thread may call."""
        count = len(self._bodies)
        if count and self._latest[0] != count:
            stamp, body = self._bodies[count - 1]
            try:
                values, types = parse_scrape(zlib.decompress(body).decode("utf-8"))
                self._latest = (count, Scrape(stamp, values) if values else None, types)
            except (ValueError, UnicodeDecodeError):
                self._latest = (count, None, {})
        return self._latest[1]

    @property
    def types(self) -> dict[str, str]:
        """The family types of the `latest()` scrape (family -> counter, gauge, ...)."""
        return dict(self._latest[2])

    def scrape(self) -> None:
        """One read now, in this thread: kept, or counted as failed with its reason."""
        before = self._clock()
        try:
            text = self._fetch(self.url, self._timeout_s)
        except (OSError, ValueError, UnicodeDecodeError) as exc:  # URLError, HTTPError, timeouts
            self._failed(exc)
            return
        stamp = (before + self._clock()) // 2
        self._bodies.append((stamp, zlib.compress(text.encode("utf-8"), 1)))

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
        """Stop (one last scrape closes the span), parse every body read, and return them;
        a body that is not Prometheus text counts as a failed scrape."""
        if self._thread is not None:
            self._halt.set()
            self._thread.join()
            self._thread = None
            if self._bodies:  # a dead endpoint is not waited on once more
                self.scrape()
        scrapes: list[Scrape] = []
        types: dict[str, str] = {}
        for stamp, body in self._bodies:
            try:
                values, seen = parse_scrape(zlib.decompress(body).decode("utf-8"))
            except (ValueError, UnicodeDecodeError) as exc:
                self._failed(exc)
                continue
            if not values:
                self._failed(ValueError("no samples (not Prometheus text?)"))
                continue
            types.update(seen)
            scrapes.append(Scrape(stamp, values))
        return ScrapeTrace(self.url, self.interval_s, tuple(scrapes), types, self._failures,
                           tuple(self._errors))
