"""SUT-side Prometheus metrics, registered into a registry the caller gives (never the global).

Read from the service at scrape time (no cost per request):

    sut_requests_total{model,outcome}   ok, failed, rejected, timeout (service counts) plus
                                        the server's own answers: invalid, unauthorized,
                                        unavailable, rejected (in-flight cap), timeout, failed
    sut_queue_depth{model}              requests queued or in the forming batch (gauge)
    sut_batch_size{model}               rows per executed batch (histogram, one per batch)
    sut_inference_rows_total{model}     rows answered successfully
    sut_batcher_knob{model,knob}        max_batch_size, max_queue_delay_us, max_queue_size
                                        in force (gauge), so a live retune shows on a graph
    sut_gpu_memory_allocated_bytes{device}, sut_gpu_memory_reserved_bytes{device},
    sut_gpu_utilization_ratio{device}   only where torch.cuda is available

Observed once per answered request (`observe`):

    sut_queue_seconds{model}            time in the batcher queue
    sut_compute_seconds{model}          forward pass of the batch the request ran in

Connections (HTTP; grpc core keeps its own), read at scrape time, present before the model
is loaded:

    sut_connections_open{protocol}            connections open now (gauge)
    sut_connections_closed_total{protocol,reason}
                                              closed by the server: idle, slow_read,
                                              refused (over the connection cap)

The service does not say which worker ran a request, so there is no worker label.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol

import torch
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from oipwire.timing import COMPUTE, QUEUE
from sut.batcher import BatcherConfig
from sut.service import InferenceService, InferResult

__all__ = ["BATCH_BUCKETS", "SECONDS_BUCKETS", "SutMetrics"]

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
SECONDS_BUCKETS = (1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
                   5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_SERVICE_OUTCOMES = ("ok", "failed", "rejected", "timeout")
_KNOBS = ("max_batch_size", "max_queue_delay_us", "max_queue_size")
_log = logging.getLogger(__name__)


class _Connections(Protocol):
    """What the connection metrics read (`sut.server.connections.ConnectionCounts`)."""

    @property
    def open(self) -> int: ...
    @property
    def closed(self) -> Mapping[str, int]: ...


class SutMetrics:
    """The metrics of one served model; `server_counts` gives the server's own outcomes."""

    def __init__(
        self,
        registry: CollectorRegistry,
        service: InferenceService,
        server_counts: Callable[[], Mapping[str, int]] = dict,
        connections: _Connections | None = None,
    ) -> None:
        self._service = service
        self._queue = Histogram("sut_queue_seconds", "Time a request waited in the queue.",
                                ["model"], registry=registry, buckets=SECONDS_BUCKETS)
        self._compute = Histogram("sut_compute_seconds",
                                  "Forward pass of the batch a request ran in.",
                                  ["model"], registry=registry, buckets=SECONDS_BUCKETS)
        self._children: dict[str, tuple[Any, Any]] = {}
        registry.register(_ServiceCollector(service, server_counts))
        if connections is not None:
            registry.register(_ConnectionCollector(connections))

    def observe(self, model: str, result: InferResult) -> None:
        """Record one answered request's queue and compute times."""
        children = self._children.get(model)
        if children is None:
            children = self._children[model] = (self._queue.labels(model),
                                                 self._compute.labels(model))
        timings = result.timings_ns
        children[0].observe(timings.get(QUEUE, 0) / 1e9)
        children[1].observe(timings.get(COMPUTE, 0) / 1e9)


class _ServiceCollector(Collector):
    """Reads `service.stats()` (and CUDA state) when Prometheus scrapes."""

    def __init__(self, service: InferenceService,
                 server_counts: Callable[[], Mapping[str, int]]) -> None:
        self._service = service
        self._server_counts = server_counts

    def describe(self) -> list[Metric]:
        return []  # collected lazily: the model name is known only once it is loaded

    def collect(self) -> Iterator[Metric]:
        if self._service.ready:
            name = self._service.metadata.name
            yield from _service_metrics(name, self._service.stats(), self._server_counts())
            yield _knobs(name, self._service.batcher_config)
        if torch.cuda.is_available():
            yield from _gpu_metrics()


class _ConnectionCollector(Collector):
    """Reads the HTTP connection counts when Prometheus scrapes."""

    def __init__(self, connections: _Connections) -> None:
        self._connections = connections

    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily("sut_connections_open", "Connections open now.",
                                  labels=["protocol"])
        gauge.add_metric(["http"], self._connections.open)
        yield gauge
        closed = CounterMetricFamily("sut_connections_closed",
                                     "Connections the server closed, by reason.",
                                     labels=["protocol", "reason"])
        for reason, n in sorted(self._connections.closed.items()):
            closed.add_metric(["http", reason], n)
        yield closed


def _service_metrics(model: str, stats: Mapping[str, Any],
                     server: Mapping[str, int]) -> Iterator[Metric]:
    requests = CounterMetricFamily("sut_requests", "Requests by outcome.",
                                   labels=["model", "outcome"])
    counts = {k: int(stats["requests"][k]) for k in _SERVICE_OUTCOMES}
    for outcome, n in server.items():
        counts[outcome] = counts.get(outcome, 0) + n
    for outcome, n in sorted(counts.items()):
        requests.add_metric([model, outcome], n)
    yield requests
    rows = CounterMetricFamily("sut_inference_rows", "Rows answered successfully.",
                               labels=["model"])
    rows.add_metric([model], int(stats["rows_ok"]))
    yield rows
    depth = GaugeMetricFamily("sut_queue_depth", "Requests queued or forming a batch.",
                              labels=["model"])
    depth.add_metric([model], int(stats["waiting"]))
    yield depth
    sizes: Mapping[int, int] = stats["batch_sizes"]
    buckets = [(str(le), sum(c for s, c in sizes.items() if s <= le)) for le in BATCH_BUCKETS]
    buckets.append(("+Inf", sum(sizes.values())))
    batch = HistogramMetricFamily("sut_batch_size", "Rows per executed batch.", labels=["model"])
    batch.add_metric([model], buckets, sum_value=sum(s * c for s, c in sizes.items()))
    yield batch


def _knobs(model: str, config: BatcherConfig) -> Metric:
    knobs = GaugeMetricFamily("sut_batcher_knob", "Batcher knobs in force.",
                              labels=["model", "knob"])
    for knob in _KNOBS:
        knobs.add_metric([model, knob], float(getattr(config, knob)))
    return knobs


def _gpu_metrics() -> Iterator[Metric]:
    allocated = GaugeMetricFamily("sut_gpu_memory_allocated_bytes",
                                  "Memory held by tensors on the device.", labels=["device"])
    reserved = GaugeMetricFamily("sut_gpu_memory_reserved_bytes",
                                 "Memory reserved by the caching allocator.", labels=["device"])
    busy = GaugeMetricFamily("sut_gpu_utilization_ratio",
                             "Share of the last sample period a kernel ran (NVML).",
                             labels=["device"])
    for index in range(torch.cuda.device_count()):
        device = f"cuda:{index}"
        allocated.add_metric([device], float(torch.cuda.memory_allocated(index)))
        reserved.add_metric([device], float(torch.cuda.memory_reserved(index)))
        try:
            busy.add_metric([device], torch.cuda.utilization(index) / 100)
        except Exception as exc:  # noqa: BLE001 (NVML is optional; leave the gauge out)
            _log.debug("no utilisation for %s: %r", device, exc)
    yield allocated
    yield reserved
    if busy.samples:
        yield busy
