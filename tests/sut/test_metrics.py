"""SUT metrics: a registry that is given, values read from the service, bounded labels."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import prometheus_client
import pytest
import torch
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sut.metrics import BATCH_BUCKETS, SutMetrics
from sut.service import InferenceService, build_service
from tests.sut.conftest import run


@pytest.fixture(scope="module")
def service() -> Iterator[InferenceService]:
    service = build_service("mlp", {"max_batch_size": "4", "warmup": "1"})
    run(service.start())
    try:
        yield service
    finally:
        run(service.stop())


def served(service: InferenceService, metrics: SutMetrics, sizes: list[int]) -> None:
    async def main() -> None:
        for rows in sizes:
            result = await service.infer(service.sample_inputs(np.arange(rows)))
            metrics.observe("mlp", result)

    run(main())


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_nothing_before_the_model_is_loaded() -> None:
    registry = CollectorRegistry()
    SutMetrics(registry, build_service("mlp", {}))
    names = {m.name for m in registry.collect()}
    assert names == {"sut_queue_seconds", "sut_compute_seconds"}
    assert "sut_requests" not in generate_latest(registry).decode()


def test_counts_depth_and_batch_sizes_come_from_the_service(service: InferenceService) -> None:
    registry = CollectorRegistry()
    metrics = SutMetrics(registry, service)
    before = service.stats()
    served(service, metrics, [1, 2, 3, 4])
    after = service.stats()
    ok = value(registry, "sut_requests_total", model="mlp", outcome="ok")
    assert ok == after["requests"]["ok"] == before["requests"]["ok"] + 4
    for outcome in ("failed", "rejected", "timeout"):
        assert value(registry, "sut_requests_total", model="mlp", outcome=outcome) == 0
    assert value(registry, "sut_inference_rows_total", model="mlp") == after["rows_ok"]
    assert value(registry, "sut_queue_depth", model="mlp") == 0
    sizes = after["batch_sizes"]
    assert value(registry, "sut_batch_size_count", model="mlp") == sum(sizes.values())
    assert value(registry, "sut_batch_size_sum", model="mlp") == sum(s * c for s, c in
                                                                     sizes.items())
    buckets = [registry.get_sample_value("sut_batch_size_bucket", {"model": "mlp", "le": str(le)})
               or 0.0 for le in BATCH_BUCKETS]
    assert buckets == sorted(buckets) and buckets[0] == sizes.get(1, 0)  # cumulative
    assert value(registry, "sut_batch_size_bucket", model="mlp", le="+Inf") == sum(sizes.values())


def test_batcher_knobs_follow_a_live_retune(service: InferenceService) -> None:
    registry = CollectorRegistry()
    SutMetrics(registry, service)
    assert value(registry, "sut_batcher_knob", model="mlp", knob="max_batch_size") == 4
    before = service.batcher_config
    service.configure(max_queue_delay_us=750, max_queue_size=9)
    try:
        assert value(registry, "sut_batcher_knob", model="mlp", knob="max_queue_delay_us") == 750
        assert value(registry, "sut_batcher_knob", model="mlp", knob="max_queue_size") == 9
    finally:
        service.configure(max_queue_delay_us=before.max_queue_delay_us,
                          max_queue_size=before.max_queue_size)


def test_queue_and_compute_are_observed_per_request(service: InferenceService) -> None:
    registry = CollectorRegistry()
    metrics = SutMetrics(registry, service)
    served(service, metrics, [1, 1, 2])
    for name in ("sut_queue_seconds", "sut_compute_seconds"):
        assert value(registry, f"{name}_count", model="mlp") == 3
        total = value(registry, f"{name}_sum", model="mlp")
        assert total is not None and 0 <= total < 10
    compute = value(registry, "sut_compute_seconds_sum", model="mlp")
    assert compute is not None and compute > 0


def test_server_outcomes_add_to_the_service_counts(service: InferenceService) -> None:
    registry = CollectorRegistry()
    SutMetrics(registry, service, lambda: {"invalid": 2, "rejected": 1, "unauthorized": 3})
    stats = service.stats()["requests"]
    assert value(registry, "sut_requests_total", model="mlp", outcome="invalid") == 2
    assert value(registry, "sut_requests_total", model="mlp", outcome="unauthorized") == 3
    assert value(registry, "sut_requests_total", model="mlp",
                 outcome="rejected") == stats["rejected"] + 1


def test_the_global_registry_is_never_touched(service: InferenceService) -> None:
    global_names = set(prometheus_client.REGISTRY._names_to_collectors)
    SutMetrics(CollectorRegistry(), service)
    assert set(prometheus_client.REGISTRY._names_to_collectors) == global_names
    assert not any(name.startswith("sut_") for name in global_names)


def test_exposition_parses_and_labels_stay_bounded(service: InferenceService) -> None:
    registry = CollectorRegistry()
    metrics = SutMetrics(registry, service, lambda: {"invalid": 1})
    served(service, metrics, [1, 2])
    families = {f.name: f for f in text_string_to_metric_families(
        generate_latest(registry).decode())}
    assert {"sut_requests", "sut_queue_depth", "sut_batch_size", "sut_queue_seconds",
            "sut_compute_seconds", "sut_inference_rows"} <= set(families)
    assert families["sut_requests"].type == "counter"
    assert families["sut_queue_depth"].type == "gauge"
    assert families["sut_batch_size"].type == "histogram"
    outcomes = {s.labels["outcome"] for s in families["sut_requests"].samples
                if s.name == "sut_requests_total"}
    assert outcomes == {"ok", "failed", "rejected", "timeout", "invalid"}
    assert {s.labels["model"] for f in families.values() for s in f.samples} == {"mlp"}


def test_gpu_gauges_only_with_cuda(service: InferenceService,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    registry = CollectorRegistry()
    SutMetrics(registry, service)
    real = torch.cuda.is_available()
    if not real:
        assert value(registry, "sut_gpu_memory_allocated_bytes", device="cuda:0") is None
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i: 1000 * (i + 1))
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i: 4000 * (i + 1))

        def no_nvml(index: int) -> int:
            raise ModuleNotFoundError("pynvml")

        monkeypatch.setattr(torch.cuda, "utilization", no_nvml)
        assert value(registry, "sut_gpu_memory_allocated_bytes", device="cuda:1") == 2000
        assert value(registry, "sut_gpu_memory_reserved_bytes", device="cuda:0") == 4000
        assert value(registry, "sut_gpu_utilization_ratio", device="cuda:0") is None
        return
    for index in range(torch.cuda.device_count()):
        used = value(registry, "sut_gpu_memory_reserved_bytes", device=f"cuda:{index}")
        assert used is not None and used >= 0
