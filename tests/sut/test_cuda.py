"""The GPU path on a CUDA device: pinned staging, a stream per worker, CUDA-event timings,
fp16/bf16; the pipelined instances, CUDA graphs against eager, pinned blocks lent and reused.

Every test here needs a CUDA GPU and is skipped without one (marker `cuda`);
`scripts/gpu_checks.sh` runs them with `pytest -m cuda`.
"""

from __future__ import annotations

import asyncio
import copy
import importlib.util
import threading
from typing import Any

import numpy as np
import pytest
import torch

from loadgen.api import run_test
from loadgen.plan.settings import settings_from_mapping
from sut.cudalaunch import CudaLauncher
from sut.devicedata import SAMPLE_INDEX
from sut.errors import InvalidInput
from sut.forward import Forward
from sut.graphs import TOLERANCE, GraphSet
from sut.models import LoadedModel, load_model
from sut.service import InferenceService, InferResult, build_service
from sut.workers import PRECISIONS, Executor
from tests.sut.conftest import run
from tests.sut.test_service import serve, submitted

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

RELATIVE = {"fp32": 1e-4, "fp16": 2e-2, "bf16": 1e-1}  # of the largest output magnitude


def _executor(precision: str = "fp32") -> tuple[Executor, LoadedModel]:
    loaded = load_model("mlp", {}, 0)
    device = torch.device("cuda:0")
    module = copy.deepcopy(loaded.module).to(device=device, dtype=PRECISIONS[precision])
    return Executor(module, device, precision, loaded.inputs, loaded.outputs), loaded


def _close(got: np.ndarray, want: np.ndarray, precision: str) -> None:
    assert got.dtype == np.float32 and got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max()))
    assert float(np.abs(got - want).max()) <= RELATIVE[precision] * scale


def _reference(loaded: LoadedModel, x: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        out: np.ndarray = loaded.module(torch.from_numpy(x)).numpy()
    return out


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_the_executor_at_each_precision_matches_the_cpu_and_times_each_phase(
        precision: str) -> None:
    executor, loaded = _executor(precision)
    x = loaded.dataset.sample_inputs(np.arange(33))["input"]
    with torch.inference_mode():
        outputs, phases = executor.run({"input": [x[:10], x[10:]]}, 33)
    _close(outputs[0], _reference(loaded, x), precision)
    assert set(phases) == {"h2d", "compute", "d2h"}
    assert min(phases.values()) >= 0 and phases["compute"] > 0  # CUDA events, in ns
    assert executor._staging["input"].is_pinned() and executor._landing[0].is_pinned()


def test_pinned_buffers_are_reused_and_outputs_stay_the_callers() -> None:
    executor, loaded = _executor()
    x = loaded.dataset.sample_inputs(np.arange(16))["input"]
    with torch.inference_mode():
        first, _ = executor.run({"input": [x]}, 16)
        kept = first[0].copy()
        staging = executor._staging["input"].data_ptr()
        landing = executor._landing[0].data_ptr()
        second, _ = executor.run({"input": [x[8:12]]}, 4)
    assert executor._staging["input"].data_ptr() == staging
    assert executor._landing[0].data_ptr() == landing
    np.testing.assert_array_equal(first[0], kept)
    _close(second[0], _reference(loaded, x[8:12]), "fp32")


def test_each_worker_has_its_own_stream_and_two_run_at_once_correctly() -> None:
    (a, loaded), (b, _) = _executor(), _executor()
    default = torch.cuda.default_stream(a.device).cuda_stream
    assert len({a._stream.cuda_stream, b._stream.cuda_stream, default}) == 3
    x = loaded.dataset.sample_inputs(np.arange(64))["input"]
    want = _reference(loaded, x)
    wrong: list[Any] = []

    def work(executor: Executor) -> None:
        torch.cuda.set_device(executor.device)
        with torch.inference_mode():
            for i in range(50):
                rows = 1 + i % 64
                out, _ = executor.run({"input": [x[:rows]]}, rows)
                if float(np.abs(out[0] - want[:rows]).max()) > 1e-3 * max(1.0, np.abs(want).max()):
                    wrong.append((executor, i))

    threads = [threading.Thread(target=work, args=(e,)) for e in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert wrong == []


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_the_service_serves_on_every_gpu_with_two_workers_each(precision: str) -> None:
    async def body(s: InferenceService) -> tuple[dict[str, Any], list[InferResult],
                                                   list[np.ndarray]]:
        inputs = [s.sample_inputs(np.arange(i, i + 4)) for i in range(32)]
        results = await asyncio.gather(*(s.infer(x) for x in inputs))
        return s.describe(), list(results), [x["input"] for x in inputs]

    info, results, inputs = serve("mlp", body, device="cuda", precision=precision,
                                  instances="2")
    expected = "fp32" if precision == "bf16" and not torch.cuda.is_bf16_supported() else precision
    assert info["precision"] == expected, info["precision_note"]
    assert info["pipelined"] and info["cuda_graphs"], info["executor_note"]
    assert info["executor"].startswith("pipelined (3-slot ring, one thread), CUDA graphs "
                                       "(buckets 1-8)")
    assert info["device"] == [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    assert info["workers"] == 2 * torch.cuda.device_count() and info["cuda_devices"]
    loaded = load_model("mlp", {}, 0)
    for result, x in zip(results, inputs, strict=True):
        _close(result.outputs["output"], _reference(loaded, x), expected)
        assert result.timings_ns["compute"] > 0 and result.timings_ns["h2d"] > 0


def test_a_gpu_run_with_energy_on_measures_the_gpu() -> None:
    settings = settings_from_mapping({
        # sized to last ~2 s on an H100 (1.3M samples/s): at 50k the window was 0.075 s
        "scenario": "Offline", "preset": "dev", "min_duration_s": 2.0, "target_qps": 1_500_000.0,
        "warmup_s": 0.0, "energy_sample_hz": 20.0, "energy_idle_s": 0.5})
    result = run_test(settings, "builtin:mlp,device=cuda,max_batch_size=256")
    assert result.stats.errors == 0 and result.sut["device"][0].startswith("cuda")
    assert "CUDA graphs (buckets 1-256)" in result.sut["executor"]  # lent blocks, graphs
    assert result.sut["samples"].startswith("device (")  # the in-process default on CUDA
    energy = result.energy
    assert energy is not None
    if importlib.util.find_spec("pynvml") is None:
        assert not energy.measured and "nvidia-ml-py" in (energy.reason or "")
        return
    assert energy.measured, energy.reason
    gpus = [d for d in energy.devices if d.kind == "gpu"]
    assert gpus and all(d.joules is not None and d.joules > 0 for d in gpus)
    assert energy.avg_w is not None and energy.avg_w > 0 and energy.joules_per_query
    assert energy.idle_w is not None and energy.idle_w > 0


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer"])
@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_graphs_answer_as_eager_does_at_each_precision_and_bucket(model: str,
                                                                  precision: str) -> None:
    loaded = load_model(model, {}, 0)
    device = torch.device("cuda:0")
    forward = Forward(copy.deepcopy(loaded.module).to(device=device,
                                                     dtype=PRECISIONS[precision]),
                      precision, loaded.outputs)
    rows = loaded.dataset.sample_inputs(np.arange(16))
    sample = [rows[s.name] for s in loaded.inputs]
    graphs = GraphSet.capture(forward, device, sample, 16)
    assert graphs.buckets == (1, 2, 4, 8, 16)
    stream = torch.cuda.Stream(device)  # type: ignore[no-untyped-call]
    with torch.inference_mode(), torch.cuda.stream(stream):
        for count in (1, 3, 5, 16):  # exact buckets, and rows padded up to one
            bucket = graphs.bucket(count)
            assert bucket is not None and bucket >= count
            given = [torch.from_numpy(a[16 - count:]).to(device) for a in sample]
            got = graphs.run(bucket, given)[0][:count].float().cpu()
            want = forward(given)[0].float().cpu()
            scale = max(1.0, float(want.abs().max()))
            assert float((got - want).abs().max()) <= TOLERANCE[precision] * scale
    assert graphs.bucket(17) is None


def test_each_instance_has_its_own_streams_and_pinned_blocks_are_reused() -> None:
    async def body(s: InferenceService) -> tuple[list[CudaLauncher], list[int], bool]:
        assert s._instances is not None
        launchers = [x for x in s._instances.launchers if isinstance(x, CudaLauncher)]
        pointers = []
        pinned = True
        for i in range(3):
            lent = s.lend(8)
            assert lent is not None
            pinned = pinned and lent.tensors["input"].is_pinned()
            pointers.append(lent.tensors["input"].data_ptr())
            np.copyto(lent.arrays["input"], s.sample_inputs(np.arange(i, i + 8))["input"])
            result = await submitted(s, lent.arrays, lent=lent)
            assert isinstance(result, InferResult)
        return launchers, pointers, pinned

    launchers, pointers, pinned = serve("mlp", body, device="cuda:0", instances="2")
    assert len(launchers) == 2 and pinned
    streams = {st.cuda_stream for x in launchers for st in x.streams}
    assert len(streams) == 6
    assert torch.cuda.default_stream(torch.device("cuda:0")).cuda_stream not in streams
    assert len(set(pointers)) == 1  # each block came back before the next lend


@pytest.mark.parametrize("graphs", ["true", "false"])
@pytest.mark.parametrize("completion_thread", ["false", "true"])
def test_the_pipeline_answers_every_batch_size_correctly(graphs: str,
                                                         completion_thread: str) -> None:
    async def body(s: InferenceService) -> tuple[dict[str, Any], list[Any]]:
        xs = [s.sample_inputs(np.arange(i, i + 1 + i % 32)) for i in range(200)]
        results = await asyncio.gather(*(s.infer(x) for x in xs))
        return s.describe(), list(zip(xs, results, strict=True))

    info, pairs = serve("mlp", body, device="cuda:0", max_batch_size="32",
                        max_queue_delay_us="200", cuda_graphs=graphs,
                        completion_thread=completion_thread)
    assert info["cuda_graphs"] is (graphs == "true")
    loaded = load_model("mlp", {}, 0)
    for x, result in pairs:
        _close(result.outputs["output"], _reference(loaded, x["input"]), "fp32")
        assert result.timings_ns["compute"] > 0


def test_a_model_graphs_cannot_hold_runs_eager_and_says_why() -> None:
    async def body(s: InferenceService) -> tuple[dict[str, Any], InferResult]:
        x = np.ones((3, 4), np.float32)
        return s.describe(), await s.infer({"input": x})

    info, result = serve("import:tests.sut.user_models:syncs", body, device="cuda:0",
                         input_shape="4")
    assert info["pipelined"] and not info["cuda_graphs"]
    assert "CUDA graphs off, eager used" in info["executor_note"]
    assert result.outputs["output"].tolist() == [[2.0] * 4] * 3


def test_each_ring_slot_replays_its_own_graphs_into_its_own_buffers() -> None:
    async def body(s: InferenceService) -> tuple[list[CudaLauncher], list[Any]]:
        assert s._instances is not None
        launchers = [x for x in s._instances.launchers if isinstance(x, CudaLauncher)]
        xs = [s.sample_inputs(np.arange(i, i + 1 + i % 16)) for i in range(120)]
        results = await asyncio.gather(*(s.infer(x) for x in xs))  # every slot busy at once
        return launchers, list(zip(xs, results, strict=True))

    launchers, pairs = serve("mlp", body, device="cuda:0", max_batch_size="16",
                             max_queue_delay_us="200")
    for launcher in launchers:
        assert len(launcher.graphs) == launcher.slots == 3
        for bucket in launcher.graphs[0].buckets:  # no two slots share a static buffer
            ins = {g.static_inputs(bucket)[0].data_ptr() for g in launcher.graphs}
            outs = {g.replay(bucket)[0].data_ptr() for g in launcher.graphs}
            assert len(ins) == len(outs) == 3
    loaded = load_model("mlp", {}, 0)
    for x, result in pairs:
        _close(result.outputs["output"], _reference(loaded, x["input"]), "fp32")


@pytest.mark.parametrize("graphs", ["true", "false"])
def test_bf16_lent_blocks_are_bf16_pinned_and_answer_as_the_eager_bf16_model(
        graphs: str) -> None:
    picks = [np.arange(5, 21), np.array([7, 3, 3, 0, 9]), np.array([1])]

    async def body(s: InferenceService) -> tuple[list[Any], list[CudaLauncher], dict[str, Any]]:
        assert s._instances is not None
        block = s.sample_inputs(np.arange(32))
        held = s.lendable(block)
        out = []
        for picked in picks:
            lent = s.lend(len(picked))
            assert lent is not None
            tensor, array = lent.tensors["input"], lent.arrays["input"]
            assert tensor.dtype == torch.bfloat16 and tensor.is_pinned()
            assert array.dtype == np.uint16 and array.ctypes.data == tensor.data_ptr()
            np.take(held["input"], picked, axis=0, out=array, mode="clip")
            via_block = await submitted(s, lent.arrays, lent=lent)
            x = block["input"][picked]
            out.append((x, via_block, await s.infer({"input": x})))  # fp32, cast on the GPU
        launchers = [x for x in s._instances.launchers if isinstance(x, CudaLauncher)]
        return out, launchers, s.describe()

    # one instance: both requests of a pair run on the same compute stream, bit for bit
    triples, launchers, info = serve("cnn", body, device="cuda:0", precision="bf16",
                                     max_batch_size="16", max_queue_delay_us="0",
                                     cuda_graphs=graphs, instances="1")
    assert info["precision"] == "bf16" and info["cuda_graphs"] is (graphs == "true")
    for launcher in launchers:  # static inputs hold bf16: a lent block goes in as it is
        for captured in launcher.graphs:
            assert captured.static_inputs(16)[0].dtype == torch.bfloat16
    loaded = load_model("cnn", {}, 0)
    device = torch.device("cuda:0")
    eager = copy.deepcopy(loaded.module).to(device=device, dtype=torch.bfloat16)
    for x, via_block, plain in triples:
        got = via_block.outputs["output"]
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, plain.outputs["output"])  # the same as before
        with torch.inference_mode():
            want = eager(torch.from_numpy(x).to(device, torch.bfloat16)).float().cpu().numpy()
        # within the graphs' check: a graph replays its bucket's kernels, and another
        # stream may pick other kernels than the eager model's own
        scale = max(1.0, float(np.abs(want).max()))
        assert float(np.abs(got - want).max()) <= TOLERANCE["bf16"] * scale


def _in_process(model: str, body: Any, **options: str) -> Any:
    """`body(service)` on a service started as the in-process adapter starts it."""
    async def main() -> Any:
        service = build_service(model, options)
        await service.start(in_process=True)
        try:
            return await body(service)
        finally:
            await service.stop()

    return run(main(), timeout_s=120)


@pytest.mark.parametrize(("model", "precision", "path"), [
    ("mlp", "fp32", "graphs"), ("mlp", "bf16", "graphs"), ("cnn", "fp32", "graphs"),
    ("cnn", "bf16", "graphs"), ("mlp", "fp32", "eager"), ("cnn", "bf16", "eager"),
    ("mlp", "bf16", "serial")])
def test_samples_from_the_device_answer_as_rows_from_the_host_do(model: str, precision: str,
                                                                 path: str) -> None:
    sets = [np.arange(i, i + 1 + i % 8) * 7 % 500 for i in range(48)]
    options = {"device": "cuda:0", "precision": precision, "max_batch_size": "8",
               "max_queue_delay_us": "500", "instances": "1",
               "cuda_graphs": str(path == "graphs").lower(),
               "pipelined": str(path != "serial").lower()}

    async def on_device(s: InferenceService) -> tuple[dict[str, Any], list[np.ndarray]]:
        assert s.samples_on_device
        futures = []
        for i, index in enumerate(sets):  # lent blocks, and plain arrays batched together
            lent = s.lend_indices(len(index)) if i % 2 else None
            if lent is None:
                futures.append(submitted(s, {SAMPLE_INDEX: index}))
                continue
            lent.arrays[SAMPLE_INDEX][:] = index
            futures.append(submitted(s, lent.arrays, lent=lent))
        results = await asyncio.gather(*futures)
        return s.describe(), [r.outputs["output"] for r in results]

    async def on_host(s: InferenceService) -> tuple[dict[str, Any], list[np.ndarray]]:
        assert not s.samples_on_device
        results = await asyncio.gather(*(s.infer(s.sample_inputs(i)) for i in sets))
        return s.describe(), [r.outputs["output"] for r in results]

    device_info, device_out = _in_process(model, on_device, start_from_device="true", **options)
    host_info, host_out = _in_process(model, on_host, start_from_device="false", **options)
    assert device_info["samples"].startswith("device (") and host_info["samples"] == "host"
    assert device_info["executor"] == host_info["executor"]
    assert device_info["cuda_graphs"] is (path == "graphs"), device_info["executor_note"]
    # the two runs batch the requests differently, and cnn's fp32 convolutions run in TF32
    # (cuDNN's default), whose algorithm may differ by batch size; a wrong row is off by O(1)
    tolerance = max(RELATIVE[precision], 1e-2 if model == "cnn" else 0.0)
    for got, want in zip(device_out, host_out, strict=True):
        assert got.dtype == np.float32 and got.shape == want.shape
        assert float(np.abs(got - want).max()) <= tolerance * max(1.0, float(np.abs(want).max()))


def test_index_blocks_are_pinned_and_reused_and_a_bad_index_fails_alone() -> None:
    async def body(s: InferenceService) -> tuple[list[int], bool, str, InferResult]:
        pointers, pinned = [], True
        for i in range(3):
            lent = s.lend_indices(8)
            assert lent is not None
            pinned = pinned and lent.tensors[SAMPLE_INDEX].is_pinned()
            pointers.append(lent.tensors[SAMPLE_INDEX].data_ptr())
            lent.arrays[SAMPLE_INDEX][:] = np.arange(i, i + 8)
            assert isinstance(await submitted(s, lent.arrays, lent=lent), InferResult)
        with pytest.raises(InvalidInput, match="sample indices must be in") as refused:
            s.submit({SAMPLE_INDEX: np.array([0, s.dataset_size])}, lambda _: None)
        with pytest.raises(InvalidInput, match="sample indices must be in"):
            s.submit({SAMPLE_INDEX: np.array([-1])}, lambda _: None)
        with pytest.raises(InvalidInput, match="the samples start on the device"):
            s.submit(s.sample_inputs(np.arange(2)), lambda _: None)
        after = await submitted(s, {SAMPLE_INDEX: np.array([3, 4])})
        return pointers, pinned, str(refused.value), after

    pointers, pinned, _, after = _in_process("mlp", body, device="cuda:0")
    assert len(set(pointers)) == 1 and pinned  # each block came back before the next lend
    loaded = load_model("mlp", {}, 0)
    _close(after.outputs["output"],
           _reference(loaded, loaded.dataset.sample_inputs(np.arange(3, 5))["input"]), "fp32")
