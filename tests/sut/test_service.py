"""The in-process service end to end: real models, real worker threads."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest
import torch

from oipwire import timing
from sut.errors import (
    ConfigError,
    InvalidInput,
    ModelLoadError,
    Overloaded,
    RequestTimeout,
    SutError,
)
from sut.models import load_model
from sut.service import InferenceService, InferResult, build_service
from tests.sut import user_models
from tests.sut.conftest import run

PHASES = tuple(c for c in timing.COMPONENTS if c != timing.SERVER_TOTAL)  # disjoint, in order
GATED = "import:tests.sut.user_models:gated"


@asynccontextmanager
async def serving(model: str, **options: str) -> AsyncIterator[InferenceService]:
    service = build_service(model, options)
    await service.start()
    try:
        yield service
    finally:
        await service.stop()


def submitted(service: InferenceService, inputs: dict[str, np.ndarray],
              **kwargs: Any) -> asyncio.Future[InferResult]:
    """Submit now (synchronously) and return a future for the result."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[InferResult] = loop.create_future()

    def settle(result: Any) -> None:
        if isinstance(result, BaseException):
            future.set_exception(result)
        else:
            future.set_result(result)

    service.submit(inputs, lambda r: loop.call_soon_threadsafe(settle, r), **kwargs)
    return future


def serve(model: str, body: Callable[[InferenceService], Awaitable[Any]], **options: str) -> Any:
    async def main() -> Any:
        async with serving(model, **options) as service:
            return await body(service)

    return run(main())


def test_outputs_equal_a_direct_call_of_the_model() -> None:
    async def body(s: InferenceService) -> list[tuple[np.ndarray, InferResult]]:
        xs = [s.sample_inputs(np.arange(i, i + 1 + i % 3)) for i in range(24)]
        return list(zip(xs, await asyncio.gather(*(s.infer(x) for x in xs)), strict=True))

    pairs = serve("mlp", body, max_batch_size="8", max_queue_delay_us="2000")
    from sut.models import load_model

    module = load_model("mlp", {}, 0).module
    with torch.inference_mode():
        for x, result in pairs:
            direct = module(torch.from_numpy(x["input"])).numpy()
            np.testing.assert_allclose(result.outputs["output"], direct, rtol=1e-5, atol=1e-6)
    assert max(r.batch_size for _, r in pairs) > 1  # requests really were batched


def test_each_response_reaches_its_own_request() -> None:
    async def body(s: InferenceService) -> None:
        xs = [np.full((1 + i % 3, 4), i, dtype=np.float32) for i in range(60)]
        results = await asyncio.gather(*(s.infer({"x": x}, priority=i % 3)
                                         for i, x in enumerate(xs)))
        for x, result in zip(xs, results, strict=True):
            np.testing.assert_array_equal(result.outputs["output"], 2 * x)

    serve("import:tests.sut.user_models:echo", body, max_batch_size="8",
          max_queue_delay_us="1000")


def test_components_never_sum_past_the_end_to_end_latency() -> None:
    async def body(s: InferenceService) -> list[tuple[int, InferResult]]:
        async def timed(i: int) -> tuple[int, InferResult]:
            began = time.perf_counter_ns()
            result = await s.infer(s.sample_inputs(np.array([i])))
            return time.perf_counter_ns() - began, result

        return list(await asyncio.gather(*(timed(i) for i in range(40))))

    for elapsed, result in serve("digits", body, max_batch_size="4", max_queue_delay_us="500"):
        t = result.timings_ns
        assert set(t) == set(timing.COMPONENTS) and min(t.values()) >= 0  # the wire's names
        assert sum(t[k] for k in PHASES) <= t["server_total"] <= elapsed
        assert result.done_ns <= time.perf_counter_ns()


@pytest.mark.parametrize("inputs, match", [
    ({"wrong": np.zeros((1, 64), np.float32)}, "want inputs"),
    ({"input": np.zeros((1, 64), np.float64)}, "FP32"),
    ({"input": np.zeros((1, 63), np.float32)}, "shape"),
    ({"input": np.zeros((64,), np.float32)}, "shape"),
    ({"input": np.zeros((0, 64), np.float32)}, "batch dim"),
    ({"input": np.zeros((9, 64), np.float32)}, "max_batch_size=8"),
    ({"input": [[0.0] * 64]}, "FP32"),
])
def test_invalid_inputs_are_refused(inputs: dict[str, Any], match: str) -> None:
    async def body(s: InferenceService) -> None:
        with pytest.raises(InvalidInput, match=match):
            await s.infer(inputs)
        with pytest.raises(InvalidInput, match="timeout_ns"):
            await s.infer(s.sample_inputs(np.array([0])), timeout_ns=0)

    serve("digits", body, max_batch_size="8")


def test_overload_and_timeout_while_the_worker_is_busy() -> None:
    async def body(s: InferenceService) -> dict[str, Any]:
        x = {"input": np.ones((1, 3), np.float32)}
        user_models.ENTERED.clear()
        user_models.GATE.clear()
        try:
            running = submitted(s, x)
            assert await asyncio.to_thread(user_models.ENTERED.wait, 5)
            queued = submitted(s, x, timeout_ns=20_000_000)
            with pytest.raises(Overloaded, match="max_queue_size=1"):
                await s.infer(x)
            with pytest.raises(RequestTimeout):
                await queued
        finally:
            user_models.GATE.set()
        assert (await running).outputs["output"].tolist() == [[3.0]]
        return s.stats()

    stats = serve(GATED, body, instances="1", max_batch_size="1", max_queue_size="1",
                  max_queue_delay_us="0", input_shape="3")
    assert stats["requests"] == {"ok": 1, "failed": 0, "rejected": 1, "timeout": 1}


def test_stop_without_drain_fails_queued_requests_and_finishes_running_ones() -> None:
    async def main() -> None:
        s = build_service(GATED, {"instances": "1", "max_batch_size": "1", "input_shape": "3"})
        await s.start()
        x = {"input": np.ones((1, 3), np.float32)}
        user_models.ENTERED.clear()
        user_models.GATE.clear()
        try:
            running = submitted(s, x)
            assert await asyncio.to_thread(user_models.ENTERED.wait, 5)
            queued = submitted(s, x)
            stopping = asyncio.ensure_future(s.stop(drain=False))
            with pytest.raises(SutError, match="stopped"):
                await queued
        finally:
            user_models.GATE.set()
        await stopping
        assert (await running).outputs["output"].tolist() == [[3.0]]
        assert not s.ready
        with pytest.raises(SutError, match="not running"):
            await s.infer(x)

    run(main())


def test_a_failing_batch_fails_its_requests_and_the_service_goes_on() -> None:
    async def body(s: InferenceService) -> dict[str, Any]:
        with pytest.raises(SutError, match="inference failed.*above 1000"):
            await s.infer({"input": np.full((2, 3), 5000, np.float32)})
        ok = await s.infer({"input": np.ones((2, 3), np.float32)})
        assert ok.outputs["output"].tolist() == [[1.0] * 3] * 2
        return s.stats()

    stats = serve("import:tests.sut.user_models:picky", body, input_shape="3")
    assert stats["requests"]["failed"] == 1 and stats["requests"]["ok"] == 1


def test_a_raising_callback_is_logged_and_the_worker_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    answered = threading.Event()

    def rude(result: Any) -> None:
        answered.set()
        raise RuntimeError("the caller's bug")

    async def body(s: InferenceService) -> InferResult:
        s.submit(s.sample_inputs(np.arange(1)), rude)
        await asyncio.to_thread(answered.wait, 10)
        return await s.infer(s.sample_inputs(np.arange(2)))

    with caplog.at_level("ERROR", logger="sut.batcher"):
        result = serve("mlp", body, workers="1", warmup="0")
    assert result.outputs["output"].shape == (2, 10)
    assert "request callback raised" in caplog.text and "the caller's bug" in caplog.text


def test_stats_and_describe() -> None:
    async def body(s: InferenceService) -> tuple[dict[str, Any], dict[str, Any]]:
        await asyncio.gather(*(s.infer(s.sample_inputs(np.array([i]))) for i in range(30)))
        return s.stats(), s.describe()

    stats, info = serve("digits", body, max_batch_size="4", preferred_batch_sizes="2;4")
    assert stats["requests"]["ok"] == 30 and stats["rows_ok"] == 30
    assert sum(k * v for k, v in stats["batch_sizes"].items()) == 30
    assert set(stats["batch_sizes"]) <= {1, 2, 3, 4}
    assert stats["compute_ns_total"] > 0 and stats["queue_ns_total"] >= 0
    assert info["device"] == ["cpu"] and info["precision"] == "fp32"
    assert info["workers"] == 2 and info["threads_per_worker"] >= 1
    assert info["batcher"]["preferred_batch_sizes"] == (2, 4)
    assert info["model_info"]["held_out_accuracy"] >= 0.95
    cold = info["cold_start"]
    assert cold["load_ns"] > 0 and cold["first_inference_ns"] > 0
    assert cold["start_ns"] >= cold["load_ns"] + cold["first_inference_ns"]


async def describe(service: InferenceService) -> dict[str, Any]:
    return service.describe()


def test_fp16_on_cpu_falls_back_to_fp32_and_says_so() -> None:
    info = serve("mlp", describe, precision="fp16")
    assert (info["precision"], info["precision_requested"]) == ("fp32", "fp16")
    assert "fp16" in info["precision_note"]


def test_bf16_on_cpu_is_used_and_close_to_fp32() -> None:
    async def body(s: InferenceService) -> tuple[str, np.ndarray]:
        result = await s.infer(s.sample_inputs(np.arange(4)))
        return s.describe()["precision"], result.outputs["output"]

    precision, low = serve("mlp", body, precision="bf16")
    _, full = serve("mlp", body, precision="fp32")
    assert precision == "bf16" and low.dtype == np.float32
    assert not np.array_equal(low, full)
    np.testing.assert_allclose(low, full, atol=0.05)


def test_live_reconfigure() -> None:
    async def body(s: InferenceService) -> None:
        x = s.sample_inputs(np.arange(6))
        assert (await s.infer(x)).batch_size == 6
        s.configure(max_batch_size=4, max_queue_delay_us=0)
        assert s.metadata.max_batch_size == 4
        assert s.describe()["batcher"]["max_batch_size"] == 4
        with pytest.raises(InvalidInput, match="max_batch_size=4"):
            await s.infer(x)
        with pytest.raises(ConfigError) as caught:
            s.configure(max_queue_delay_us=-5)
        assert caught.value.key == "max_queue_delay_us"
        assert (await s.infer(s.sample_inputs(np.arange(3)))).batch_size <= 4

    serve("mlp", body, max_batch_size="8")


@pytest.mark.parametrize("model", ["cnn", "transformer"])
def test_other_builtins_serve(model: str) -> None:
    async def body(s: InferenceService) -> tuple[int, ...]:
        result = await s.infer(s.sample_inputs(np.arange(3)))
        return result.outputs["output"].shape

    assert serve(model, body) == (3, 10)


@pytest.mark.parametrize("options, key", [
    ({"max_batch": "8"}, "max_batch"),
    ({"max_batch_size": "eight"}, "max_batch_size"),
    ({"max_batch_size": "0"}, "max_batch_size"),
    ({"preferred_batch_sizes": "4;16"}, "preferred_batch_sizes"),
    ({"precision": "int4"}, "precision"),
    ({"device": "gpu"}, "device"),
    ({"workers": "1", "instances": "1"}, "workers"),
    ({"input_shape": "3"}, "input_shape"),
])
def test_build_service_names_the_bad_key(options: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_service("mlp", options)
    assert caught.value.key == key
    assert key in str(caught.value)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA device is present")
def test_cuda_asked_for_without_a_gpu_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="device"):
        build_service("mlp", {"device": "cuda"})


def test_a_service_that_has_not_started() -> None:
    service = build_service("mlp", {})
    assert not service.ready
    with pytest.raises(SutError, match="not running"):
        service.submit({}, lambda r: None)
    with pytest.raises(SutError, match="not been started"):
        service.metadata  # noqa: B018
    service.configure(max_batch_size=16)
    assert service.describe()["batcher"]["max_batch_size"] == 16


def test_loading_runs_in_a_thread_that_has_ended(monkeypatch: pytest.MonkeyPatch) -> None:
    # A thread that ran parallel torch ops keeps an OpenMP pool while it lives; one
    # left alive makes libgomp throttle the workers' spin-waits.
    loaders: list[threading.Thread] = []

    def recording(*args: Any) -> Any:
        loaders.append(threading.current_thread())
        return load_model(*args)

    monkeypatch.setattr("sut.service.load_model", recording)

    async def body(service: InferenceService) -> bool:
        return loaders[0].is_alive()

    assert serve("mlp", body, warmup="0") is False
    assert len(loaders) == 1


def test_a_load_failure_is_raised_by_start(monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: Any) -> Any:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr("sut.service.load_model", failing)
    service = build_service("mlp", {})
    with pytest.raises(ModelLoadError, match="disk on fire"):
        run(service.start())
    assert not service.ready
