"""Prometheus exporter: a run's live figures, read from the live `Collector` at scrape time.

Nothing runs per query. `PrometheusExporter` is a run monitor (`loadgen.api.Monitor`)
and a prometheus_client collector registered into a registry it is given (or makes;
never the global one). On each scrape it takes a snapshot of the live figures (a
`Collector`, or the driver's merged view of several workers: `record.watched.Watched`) and
turns the HDR histograms into Prometheus cumulative buckets at fixed bounds
(`BUCKETS_S`, 50 us .. 60 s, R10 preferred numbers: each bound at most 1.28x the one
before): the count at a bound is the HDR count up to the HDR bucket holding it (exact
to HDR's 0.1%), `_sum` is the HDR mean times the count, and `+Inf` is the total.

Threads: the scrape runs in prometheus_client's HTTP thread while the run's event loop
records. The snapshot is therefore taken *on the loop thread* (`run_coroutine_threadsafe`):
it flushes each recorder's buffer and copies its counts up to the highest nonzero one (a
memcpy of at most 270 KB per histogram, ~0.1 ms for all of them at ms latencies) between two
loop callbacks, so counters and histograms are mutually consistent; bucketing happens
afterwards in the scrape thread. A loop busy for longer
than `SNAPSHOT_TIMEOUT_S` gets the previous snapshot; a closed loop (the run ended or
failed) is read directly. `stop` freezes the final snapshot, which later scrapes and
the optional Pushgateway push (`pushgateway=URL`, done in `stop`) report.

Metrics (labels scenario, sut, run_id on every one; `kind` is capped at 64 values by
the collector, `component` at `MAX_COMPONENTS`):

    loadgen_queries_issued_total, loadgen_queries_completed_total,
    loadgen_queries_failed_total{kind}, loadgen_queries_measured_total,
    loadgen_queries_good_total (measured and within the latency SLO; goodput),
    loadgen_queries_in_flight, loadgen_target_queries_per_second (open loop only),
    loadgen_achieved_queries_per_second, loadgen_latency_slo_seconds (when set),
    loadgen_latency_seconds (from the scheduled time), loadgen_service_latency_seconds
    (from the actual send), loadgen_issue_lag_seconds, loadgen_component_seconds{component}

Token runs (streams recorded) add, each latency from the scheduled time:

    loadgen_ttft_seconds, loadgen_tpot_seconds, loadgen_itl_seconds, loadgen_e2e_seconds,
    loadgen_input_tokens_total, loadgen_output_tokens_total,
    loadgen_requests_good_total (measured streams meeting every goodput SLO)

Multi-turn sessions add loadgen_turn_ttft_seconds{turn} and loadgen_turn_tpot_seconds{turn}
(`live.turn_metrics`: at most `MAX_TURN_LABELS` turn labels, later turns folded into the last).
With an energy meter (`watch_energy`), each device's latest reading, and once the run has
ended its energy figures: see `live.energy_metrics`. With `server_metrics` (`watch_server`),
the server's own gauges live and its window figures at the end: see `live.server_metrics`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import secrets
import sys
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Self

import numpy as np
import numpy.typing as npt
from prometheus_client import CollectorRegistry, push_to_gateway, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from loadgen.errors import LoadgenError, SettingsError
from loadgen.judge.energy import EnergyFigures
from loadgen.judge.servermetrics import ServerMetrics
from loadgen.live.energy_metrics import device_gauges, energy_gauges
from loadgen.live.server_metrics import server_gauges, server_run_gauges
from loadgen.live.turn_metrics import fold_turns, turn_families
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import IssueMode
from loadgen.record.energy import EnergyMeter
from loadgen.record.histograms import new_histogram
from loadgen.record.scrape import ServerScraper
from loadgen.record.watched import Histogrammed, Named, Watched
from loadgen.report.result import RunResult

__all__ = [
    "BUCKETS_S",
    "DEFAULT_HOST",
    "MAX_COMPONENTS",
    "SNAPSHOT_TIMEOUT_S",
    "PrometheusExporter",
    "check_pushgateway",
    "monitors_for",
    "parse_listen",
]

_R10 = (1.0, 1.25, 1.6, 2.0, 2.5, 3.15, 4.0, 5.0, 6.3, 8.0)  # preferred numbers, ratio <= 1.28
BUCKETS_S: tuple[float, ...] = (
    *sorted(round(m * 10.0**e, 9) for e in range(-5, 2) for m in _R10 if 5e-5 <= m * 10.0**e <= 50),
    60.0,
)
DEFAULT_HOST = "127.0.0.1"
MAX_COMPONENTS = 32
SNAPSHOT_TIMEOUT_S = 0.5  # under a 1 s scrape timeout
_LABELS = ("scenario", "sut", "run_id")
_HISTOGRAMS = (  # exported name, Collector attribute, help
    ("loadgen_latency_seconds", "latency", "Sample latency from the scheduled issue time."),
    ("loadgen_service_latency_seconds", "service_latency", "Query latency from the actual send."),
    ("loadgen_issue_lag_seconds", "issue_lag", "Actual send minus scheduled issue time."),
)
_TOKEN_HISTOGRAMS = (  # exported name, token recorder key, help
    ("loadgen_ttft_seconds", "ttft_ns", "Time to first token, from the scheduled time."),
    ("loadgen_tpot_seconds", "tpot_ns", "Time per output token after the first, per request."),
    ("loadgen_itl_seconds", "itl_ns", "Every gap between consecutive tokens (token-weighted)."),
    ("loadgen_e2e_seconds", "e2e_ns", "Time to the last token, from the scheduled time."),
)
_TOKEN_COUNTERS = (  # exported name, token counter, help
    ("loadgen_input_tokens", "input_total", "Prompt tokens of measured streams."),
    ("loadgen_output_tokens", "output_total", "Output tokens of measured streams."),
    ("loadgen_requests_good", "good", "Measured streams meeting every goodput SLO."),
)


def parse_listen(text: str) -> tuple[str, int]:
    """'9464' -> ('127.0.0.1', 9464); 'HOST:PORT' -> (HOST, PORT); raises SettingsError."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]") or DEFAULT_HOST
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise SettingsError([f"--prometheus-port {text!r}: expected PORT or HOST:PORT"])
    return host, int(port)


def check_pushgateway(url: str) -> str:
    """The Pushgateway URL as given, checked before the run (a scheme-less `HOST:PORT` is
    http, as prometheus_client takes it); raises SettingsError naming what is wrong."""
    parts = urllib.parse.urlsplit(url if "://" in url else f"http://{url}")
    try:
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError as exc:
        raise SettingsError([f"--pushgateway {url!r}: {exc}"]) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise SettingsError([f"--pushgateway {url!r}: expected http[s]://HOST[:PORT][/PATH]"])
    return url


class _Layout:
    """Where each fixed bound falls in the HDR counts array, and each HDR bucket's midpoint."""

    def __init__(self, bounds_s: Iterable[float]) -> None:
        hist = new_histogram()
        lowest = np.array([hist.get_value_from_index(i) for i in range(hist.counts_len)],
                          dtype=np.float64)
        top = hist.get_highest_equivalent_value(int(lowest[-1])) + 1
        widths = np.diff(lowest, append=float(top))
        self.mid_s = (lowest + np.floor(widths / 2)) / 1e9  # HDR's median-equivalent value
        bounds = sorted(set(bounds_s))
        self.le = [str(float(b)) for b in bounds]
        self.index = np.array([hist.get_counts_array_index(round(b * 1e9)) for b in bounds])

    def buckets(self, counts: npt.NDArray[np.uint64]) -> tuple[list[tuple[str, float]], float]:
        """Cumulative (le, count) pairs ending with +Inf, and the sum in seconds.

        `counts` is a prefix of the HDR counts array (the rest being zero).
        """
        cumulative = np.cumsum(counts, dtype=np.uint64)
        total = int(cumulative[-1])
        at = cumulative[np.minimum(self.index, cumulative.size - 1)].tolist()
        pairs: list[tuple[str, float]] = [(le, float(n)) for le, n in zip(self.le, at, strict=True)]
        pairs.append(("+Inf", float(total)))
        return pairs, float((counts * self.mid_s[: counts.size]).sum())  # no BLAS threads


def _counts(recorder: Histogrammed) -> npt.NDArray[np.uint64]:
    """A copy of a recorder's counts up to its maximum, its buffer flushed first.

    Call on the recording thread; the copy stops at the highest nonzero counter.
    """
    hist = recorder.histogram
    end = hist.get_counts_array_index(hist.max_value) + 1
    counts: npt.NDArray[np.uint64] = np.ctypeslib.as_array(hist.counts)[:end].copy()
    return counts


@dataclass(frozen=True, slots=True)
class _Snapshot:
    """The collector's figures at one instant."""

    issued: int
    completed: int
    failed: dict[str, int]
    measured: int
    good: int
    in_flight: int
    achieved_qps: float
    histograms: dict[str, npt.NDArray[np.uint64]]
    components: dict[str, npt.NDArray[np.uint64]]
    token_histograms: dict[str, npt.NDArray[np.uint64]] | None = None  # token runs only
    token_counters: dict[str, int] | None = None
    turn_histograms: dict[str, dict[str, npt.NDArray[np.uint64]]] | None = None  # by turn label


class PrometheusExporter:
    """A run monitor serving the live collector's figures; see the module docstring.

    `listen` ('PORT' or 'HOST:PORT', loopback by default) serves /metrics from `serve()`
    (or `with exporter:`) until `close()`. `run_id` None draws a new id for each run.
    """

    def __init__(self, registry: CollectorRegistry | None = None, listen: str | None = None,
                 pushgateway: str | None = None, run_id: str | None = None,
                 buckets_s: Iterable[float] = BUCKETS_S) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.pushgateway = None if pushgateway is None else check_pushgateway(pushgateway)
        self._listen = parse_listen(listen) if listen is not None else None
        self._fixed_run_id = run_id
        self._layout = _Layout(buckets_s)
        self._server: Any = None
        self._thread: Any = None
        self._figures: Watched | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._labels: list[str] = []
        self._target_qps: float | None = None
        self._slo_s = 0.0
        self._start_s = 0.0
        self._last: _Snapshot | None = None
        self._final: _Snapshot | None = None
        self._meter: EnergyMeter | None = None
        self._energy: EnergyFigures | None = None
        self._scraper: ServerScraper | None = None
        self._server_figures: ServerMetrics | None = None
        self.run_id = ""
        self.registry.register(self)

    # -- serving --------------------------------------------------------------------------

    @property
    def port(self) -> int | None:
        """The port /metrics is served on (resolved when `listen` asked for port 0)."""
        return int(self._server.server_address[1]) if self._server is not None else None

    def serve(self) -> None:
        """Start serving /metrics on `listen` (no-op without one, or when already serving)."""
        if self._listen is None or self._server is not None:
            return
        host, port = self._listen
        try:
            self._server, self._thread = start_http_server(port, host, self.registry)
        except OSError as exc:
            raise LoadgenError(f"cannot serve metrics on {host}:{port}: {exc}") from exc

    def close(self) -> None:
        """Stop serving and unregister from the registry."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=5)
            self._server = self._thread = None
        with contextlib.suppress(KeyError):
            self.registry.unregister(self)

    def __enter__(self) -> Self:
        self.serve()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # -- Monitor --------------------------------------------------------------------------

    def start(self, plan: RunPlan, sut: Named, figures: Watched) -> None:
        """Watch a new run's live figures; called on the run's event loop thread."""
        settings = plan.settings
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # fed by hand, single-threaded
            self._loop = None
        self.run_id = self._fixed_run_id or time.strftime("%Y%m%dT%H%M%S-") + secrets.token_hex(3)
        self._labels = [str(settings.scenario), sut.name, self.run_id]
        self._target_qps = None if plan.issue_mode is IssueMode.CLOSED else settings.target_qps
        self._slo_s = settings.target_latency_ms / 1e3
        self._start_s = time.perf_counter()
        self._last = self._final = None
        self._meter, self._energy = None, None
        self._scraper, self._server_figures = None, None
        self._figures = figures

    def watch_energy(self, meter: EnergyMeter) -> None:
        """Serve the energy meter's latest readings while the run lasts (`EnergyWatcher`)."""
        self._meter = meter

    def watch_server(self, scraper: ServerScraper) -> None:
        """Re-export the server's scraped gauges while the run lasts (`ServerWatcher`)."""
        self._scraper = scraper

    def stop(self, result: RunResult | None) -> None:
        """Freeze the final figures; push them to the Pushgateway if one was given."""
        if self._figures is None:
            return
        final = self._read()
        self._scraper = None
        if result is not None:
            final = replace(final, achieved_qps=result.stats.qps_completed)
            self._energy = result.energy
            self._server_figures = result.server_metrics
        self._final = final
        if self.pushgateway:
            try:
                push_to_gateway(self.pushgateway, job="loadgen", registry=self.registry,
                                grouping_key={"run_id": self.run_id}, timeout=10)
            except Exception as exc:  # noqa: BLE001 - after the run: report it, lose nothing
                print(f"loadgen: push to {self.pushgateway} failed: {exc!r}", file=sys.stderr)

    # -- prometheus_client Collector ------------------------------------------------------

    def describe(self) -> list[Metric]:
        """Nothing to check at registration (names are fixed and prefixed)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """The families of the current snapshot (nothing before the first run)."""
        snap = self._snapshot()
        if snap is None:
            return
        yield from self._counters(snap)
        yield from self._gauges(snap)
        yield from self._histograms(snap)
        yield from self._token_families(snap)
        if self._meter is not None:
            yield from device_gauges(_LABELS, self._labels, self._meter.latest())
        if self._energy is not None:
            yield from energy_gauges(_LABELS, self._labels, self._energy)
        if self._scraper is not None:
            yield from server_gauges(_LABELS, self._labels, self._scraper)
        if self._server_figures is not None:
            yield from server_run_gauges(_LABELS, self._labels, self._server_figures)

    def _snapshot(self) -> _Snapshot | None:
        if self._final is not None or self._figures is None:
            return self._final
        loop = self._loop
        if loop is None:
            return self._read()

        async def take() -> _Snapshot:
            return self._read()

        coro = take()
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # loop closed: nothing records any more
            coro.close()
            return self._read()
        try:
            self._last = future.result(timeout=SNAPSHOT_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            pass  # loop busy: serve the previous snapshot
        return self._last

    def _read(self) -> _Snapshot:
        c = self._figures
        assert c is not None
        failed = dict(c.errors_by_kind)
        completed = c.finished - sum(failed.values())
        elapsed = time.perf_counter() - self._start_s
        return _Snapshot(
            issued=c.issued, completed=completed, failed=failed, measured=c.measured_queries,
            good=c.measured_queries - c.overlatency, in_flight=c.in_flight,
            achieved_qps=completed / elapsed if elapsed > 0 else 0.0,
            histograms={name: _counts(getattr(c, attr)) for name, attr, _ in _HISTOGRAMS},
            components={name: _counts(r)
                        for name, r in sorted(c.components.items())[:MAX_COMPONENTS]},
            token_histograms=None if c.tokens is None else {
                name: _counts(c.tokens.recorders[key]) for name, key, _ in _TOKEN_HISTOGRAMS},
            token_counters=None if c.tokens is None else {
                name: c.tokens.counters[key] for name, key, _ in _TOKEN_COUNTERS},
            turn_histograms=None if c.tokens is None else fold_turns(
                {turn: {key: _counts(r) for key, r in recorders.items()}
                 for turn, recorders in c.tokens.turns.by_turn.items()}),
        )

    def _counters(self, s: _Snapshot) -> Iterator[Metric]:
        labels = self._labels
        for name, doc, value in (
            ("loadgen_queries_issued", "Queries handed to the SUT.", s.issued),
            ("loadgen_queries_completed", "Queries the SUT answered.", s.completed),
            ("loadgen_queries_measured", "Answered queries in the measured window.", s.measured),
            ("loadgen_queries_good", "Measured queries within the latency SLO.", s.good),
        ):
            family = CounterMetricFamily(name, doc, labels=_LABELS)
            family.add_metric(labels, value)
            yield family
        failed = CounterMetricFamily("loadgen_queries_failed", "Queries failed, by kind.",
                                     labels=(*_LABELS, "kind"))
        for kind, count in sorted(s.failed.items()):
            failed.add_metric([*labels, kind], count)
        yield failed

    def _gauges(self, s: _Snapshot) -> Iterator[Metric]:
        labels = self._labels
        values: list[tuple[str, str, float]] = [
            ("loadgen_queries_in_flight", "Queries issued and not yet answered.", s.in_flight),
            ("loadgen_achieved_queries_per_second",
             "Answered queries per second so far (at the end: the result's qps_completed).",
             s.achieved_qps),
        ]
        if self._target_qps is not None:
            values.append(("loadgen_target_queries_per_second", "Offered rate (open loop).",
                           self._target_qps))
        if self._slo_s:
            values.append(("loadgen_latency_slo_seconds", "Latency SLO.", self._slo_s))
        for name, doc, value in values:
            family = GaugeMetricFamily(name, doc, labels=_LABELS)
            family.add_metric(labels, value)
            yield family

    def _histograms(self, s: _Snapshot) -> Iterator[Metric]:
        labels = self._labels
        for name, _, doc in _HISTOGRAMS:
            yield self._histogram(name, doc, s.histograms[name])
        components = HistogramMetricFamily("loadgen_component_seconds",
                                           "Component durations reported by the SUT.",
                                           labels=(*_LABELS, "component"))
        for component, counts in s.components.items():
            buckets, total_s = self._layout.buckets(counts)
            components.add_metric([*labels, component], buckets, total_s)
        yield components

    def _histogram(self, name: str, doc: str, counts: npt.NDArray[np.uint64]) -> Metric:
        """One histogram family of this run's labels, in the exporter's buckets."""
        family = HistogramMetricFamily(name, doc, labels=_LABELS)
        buckets, total_s = self._layout.buckets(counts)
        family.add_metric(self._labels, buckets, total_s)
        return family

    def _token_families(self, s: _Snapshot) -> Iterator[Metric]:
        """A token run's latency histograms and token counters (nothing otherwise)."""
        if s.token_histograms is None or s.token_counters is None:
            return
        labels = self._labels
        for name, _, doc in _TOKEN_HISTOGRAMS:
            yield self._histogram(name, doc, s.token_histograms[name])
        for name, _, doc in _TOKEN_COUNTERS:
            counter = CounterMetricFamily(name, doc, labels=_LABELS)
            counter.add_metric(labels, s.token_counters[name])
            yield counter
        yield from turn_families(_LABELS, labels, s.turn_histograms or {}, self._layout.buckets)


@contextlib.contextmanager
def monitors_for(listen: str | None, pushgateway: str | None) -> Iterator[list[PrometheusExporter]]:
    """The CLI's monitors: an exporter serving on `listen` and/or pushing, else none."""
    if listen is None and not pushgateway:
        yield []
        return
    with PrometheusExporter(listen=listen, pushgateway=pushgateway) as exporter:
        yield [exporter]
