"""The in-process adapter against the real service, with a small fake sink (no engine)."""

from __future__ import annotations

import ast
import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from loadgen.adapters import inprocess
from loadgen.adapters.inprocess import InProcessSut, _kind
from loadgen.errors import SutError, SutSpecError
from oipwire import timing
from sut import errors as sut_errors
from sut.devicedata import INDEX_SPEC, SAMPLE_INDEX
from sut.gather import Gatherer
from sut.service import InferResult
from sut.staging import Lent, PinnedPool
from tests.sut import user_models

PHASES = set(timing.COMPONENTS)  # the names a remote run records too


@pytest.fixture(scope="module", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOADGEN_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


class FakeSink:
    """Records completions; checks they arrive on the loop thread, once per query."""

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        self.done_calls: dict[int, dict[str, Any]] = {}
        self.failures: dict[int, str] = {}
        self.calls = 0
        self.changed = asyncio.Event()

    def done(self, query_id: int, done_ns: int, components: Any = None,
             sample_done_ns: Any = None, output: Any = None) -> None:
        self._check(query_id)
        self.done_calls[query_id] = {"done_ns": done_ns, "components": components,
                                     "sample_done_ns": sample_done_ns, "output": output,
                                     "seen_ns": time.perf_counter_ns()}

    def failed(self, query_id: int, done_ns: int, kind: str, detail: str | None = None) -> None:
        self._check(query_id)
        self.failures[query_id] = kind

    def _check(self, query_id: int) -> None:
        assert threading.get_ident() == self.thread
        assert query_id not in self.done_calls and query_id not in self.failures
        self.calls += 1
        self.changed.set()

    async def until(self, calls: int, timeout_s: float = 10.0) -> None:
        async def wait() -> None:
            while self.calls < calls:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), timeout_s)


def drive(spec: str, body: Any) -> Any:
    async def main() -> Any:
        sut, sink = InProcessSut.from_spec(spec), FakeSink()
        await sut.start(sink, timers=None)  # type: ignore[arg-type]
        try:
            return await body(sut, sink)
        finally:
            await sut.stop()

    return asyncio.run(asyncio.wait_for(main(), 30))


def test_queries_of_one_several_and_many_samples() -> None:
    queries = [np.array([0]), np.arange(1, 5), np.arange(20), np.array([600])]

    async def body(sut: InProcessSut, sink: FakeSink) -> tuple[Any, Any]:
        for query_id, indices in enumerate(queries):
            sut.issue(query_id, indices)
        await sink.until(len(queries))
        service = sut._service

        async def predict(index: int) -> int:
            result = await service.infer(service.sample_inputs(np.array([index % 540])))
            return int(result.outputs["output"].argmax())

        return sink, [await asyncio.gather(*(predict(i) for i in q)) for q in queries]

    sink, predicted = drive("builtin:digits,max_batch_size=8", body)
    assert not sink.failures
    for query_id, indices in enumerate(queries):
        call = sink.done_calls[query_id]
        np.testing.assert_array_equal(call["output"], predicted[query_id])
        assert set(call["components"]) == PHASES | {"batch_size"}
        assert 1 <= call["components"]["batch_size"] <= 8
        assert call["done_ns"] <= call["seen_ns"]
        chunked = len(indices) > 8
        assert (call["sample_done_ns"] is not None) == chunked
    many = sink.done_calls[2]
    assert len(many["sample_done_ns"]) == 20 and max(many["sample_done_ns"]) == many["done_ns"]
    assert many["sample_done_ns"].dtype == np.int64  # one array, filled a chunk at a time
    assert min(many["sample_done_ns"]) > 0  # every sample's chunk stamped it


def test_a_chunked_query_of_an_unlabelled_model_returns_every_output_row() -> None:
    indices = np.arange(1010, 1031)  # 21 samples in chunks of 8, wrapping past the dataset

    async def body(sut: InProcessSut, sink: FakeSink) -> tuple[Any, list[Any]]:
        sut.issue(0, indices)
        await sink.until(1)
        service = sut._service
        rows = [service.infer(service.sample_inputs(np.array([i % sut.sample_count])))
                for i in indices]
        return sink.done_calls[0], await asyncio.gather(*rows)

    call, rows = drive("builtin:mlp,max_batch_size=8", body)
    expected = np.concatenate([r.outputs["output"] for r in rows])
    assert call["output"].shape == (21, 10) and call["output"].dtype == np.float32
    np.testing.assert_allclose(call["output"], expected, rtol=1e-5, atol=1e-6)


def test_accuracy_is_scored_from_the_outputs() -> None:
    async def body(sut: InProcessSut, sink: FakeSink) -> tuple[list[np.ndarray], dict[int, Any]]:
        every = np.arange(sut.sample_count)
        queries = [every[i:i + 7] for i in range(0, len(every), 7)]
        for query_id, indices in enumerate(queries):
            sut.issue(query_id, indices)
        await sink.until(len(queries))
        outputs = {q: call["output"] for q, call in sink.done_calls.items()}
        value, samples = sut.score(queries, outputs)
        assert samples == sut.sample_count == 540
        assert value >= 0.95
        assert sut.score(queries, {}) == (0.0, 540)
        assert sut.describe() == {"sut": "builtin:digits", **sut._service.describe()}
        return queries, outputs

    drive("builtin:digits,max_batch_size=16,max_queue_delay_us=200", body)


def test_unlabelled_models_cannot_be_scored() -> None:
    async def body(sut: InProcessSut, sink: FakeSink) -> None:
        with pytest.raises(SutError, match="no labels"):
            sut.score([np.array([0])], {0: np.zeros(10)})

    drive("builtin:mlp", body)


def test_an_overloaded_query_fails_with_its_kind() -> None:
    async def body(sut: InProcessSut, sink: FakeSink) -> FakeSink:
        user_models.ENTERED.clear()
        user_models.GATE.clear()
        try:
            sut.issue(0, np.array([0]))
            assert await asyncio.to_thread(user_models.ENTERED.wait, 5)
            sut.issue(1, np.array([1]))
            sut.issue(2, np.array([2]))
            await sink.until(1)
            assert sink.failures == {2: "overloaded"}
        finally:
            user_models.GATE.set()
        await sink.until(3)
        return sink

    sink = drive("builtin:import:tests.sut.user_models:gated,input_shape=3,instances=1,"
                 "max_batch_size=1,max_queue_size=1,max_queue_delay_us=0", body)
    assert sorted(sink.done_calls) == [0, 1]


def test_a_chunked_query_with_a_refused_chunk_fails_once(monkeypatch: pytest.MonkeyPatch) -> None:
    async def body(sut: InProcessSut, sink: FakeSink) -> FakeSink:
        real = sut._service.submit
        calls = []

        def flaky(inputs: Any, callback: Any, **kwargs: Any) -> None:
            calls.append(1)
            if len(calls) == 2:
                raise sut_errors.Overloaded("queue full")
            real(inputs, callback, **kwargs)

        monkeypatch.setattr(sut._service, "submit", flaky)
        sut.issue(7, np.arange(40))
        await sink.until(1)
        sut.issue(8, np.array([3]))
        await sink.until(2)
        return sink

    sink = drive("builtin:mlp,max_batch_size=4", body)
    assert sink.failures == {7: "overloaded"} and list(sink.done_calls) == [8]


@pytest.mark.parametrize("error, kind", [
    (sut_errors.Overloaded("x"), "overloaded"),
    (sut_errors.RequestTimeout("x"), "timeout"),
    (sut_errors.SutError("x"), "error"),
    (sut_errors.InvalidInput("x"), "error"),
])
def test_failure_kinds(error: BaseException, kind: str) -> None:
    assert _kind(error) == kind


@pytest.mark.parametrize("spec, match", [
    ("builtin:", "no model"),
    ("builtin:mlp,max_batch_size", "key=value"),
    ("builtin:mlp,bogus=1", "bogus"),
    ("builtin:mlp,max_batch_size=0", "max_batch_size"),
    ("builtin:resnet", "resnet"),
    ("http://localhost", "builtin:MODEL"),
])
def test_bad_specs(spec: str, match: str) -> None:
    with pytest.raises(SutSpecError, match=match):
        InProcessSut.from_spec(spec)


def test_name_and_start_failure() -> None:
    sut = InProcessSut.from_spec("builtin:import:tests.sut.user_models:not_a_module,input_shape=3")
    assert sut.name == "builtin:import:tests.sut.user_models:not_a_module"
    with pytest.raises(SutError, match="not torch.nn.Module"):
        asyncio.run(sut.start(FakeSink(), timers=None))  # type: ignore[arg-type]


def test_imports_only_the_adapter_seam_and_errors_of_loadgen() -> None:
    path = Path(__file__).resolve().parents[3] / "loadgen" / "adapters" / "inprocess.py"
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
    own = {m for m in imported if m == "loadgen" or m.startswith("loadgen.")}
    assert own == {"loadgen.adapters.base", "loadgen.errors"}


class RecordingLoop:
    """Stands in for the event loop: keeps what sut threads hand it, runs it on demand."""

    def __init__(self) -> None:
        self.posted: list[Any] = []
        self.reported: list[dict[str, Any]] = []

    def call_soon_threadsafe(self, callback: Any, *args: Any) -> None:
        self.posted.append((callback, args))

    def call_exception_handler(self, context: dict[str, Any]) -> None:
        self.reported.append(context)


def test_completions_queued_together_wake_the_loop_once_and_none_is_dropped() -> None:
    adapter = InProcessSut.from_spec("builtin:mlp,device=cpu")
    loop = RecordingLoop()
    adapter._loop = loop  # type: ignore[assignment]
    ran: list[int] = []

    def complete(n: int) -> None:
        if n == 2:
            raise ValueError("a sink that raises")
        ran.append(n)

    for n in range(4):  # a batch's completions, before the loop runs
        adapter._post(complete, n)
    assert len(loop.posted) == 1
    callback, args = loop.posted.pop()
    callback(*args)
    assert ran == [0, 1, 3] and "a sink that raises" in str(loop.reported[0]["exception"])
    adapter._post(complete, 5)  # the next batch wakes the loop again
    assert len(loop.posted) == 1


def test_bf16_queries_gather_bf16_rows_and_answer_as_plain_requests_do() -> None:
    queries = [np.arange(3, 9), np.array([500, 7, 7, 1030]), np.arange(40)]  # 40: chunked

    async def body(sut: InProcessSut, sink: FakeSink) -> tuple[Any, list[np.ndarray]]:
        assert sut._lendable["input"].dtype == np.uint16  # converted once, at start
        assert sut._block["input"].dtype == np.float32  # single rows and fallbacks: as sent
        for query_id, indices in enumerate(queries):  # one at a time: batches as below
            sut.issue(query_id, indices)
            await sink.until(query_id + 1)
        service = sut._service
        plain = []
        for indices in queries:  # the same rows, fp32 and cast in the forward, same batches
            rows = service.sample_inputs(np.remainder(indices, sut.sample_count))["input"]
            parts = [await service.infer({"input": rows[i:i + 16]})
                     for i in range(0, len(rows), 16)]
            plain.append(np.concatenate([p.outputs["output"] for p in parts]))
        return sink, plain

    sink, plain = drive("builtin:cnn,device=cpu,precision=bf16,max_batch_size=16,"
                        "max_queue_delay_us=0", body)
    assert not sink.failures
    for query_id, want in enumerate(plain):
        np.testing.assert_array_equal(sink.done_calls[query_id]["output"], want)


def test_the_gather_stays_in_one_thread_on_the_cpu_and_stops_with_the_adapter(
        monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[Gatherer] = []

    class Recording(Gatherer):
        def close(self) -> None:
            closed.append(self)
            super().close()

    monkeypatch.setattr(inprocess, "Gatherer", Recording)

    async def body(sut: InProcessSut, sink: FakeSink) -> Any:
        assert not closed
        return sut._gatherer

    gatherer = drive("builtin:mlp,device=cpu", body)
    assert isinstance(gatherer, Recording) and closed == [gatherer]
    assert gatherer.helpers == 0  # the CPU's cores are the workers'


class IndexedService:
    """Stands in for a service whose samples are on the device: keeps what each request
    sent and answers it at once with its indices as the output."""

    ready = True
    samples_on_device = True
    dataset_size = 10

    def __init__(self) -> None:
        self.pool = PinnedPool([INDEX_SPEC], rows=4, limit=2, pinned=False)
        self.metadata = SimpleNamespace(max_batch_size=4)
        self.sent: list[tuple[list[int], bool]] = []

    def describe(self) -> dict[str, Any]:
        return {"workers": 1, "in_flight": 2, "samples": "device (0.0 MiB per GPU)"}

    def labels(self, indices: np.ndarray) -> None:
        return None

    def sample_inputs(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        raise AssertionError("rows are never read when the samples are on the device")

    def lend_indices(self, rows: int) -> Lent | None:
        return self.pool.lend(rows)

    def submit(self, inputs: dict[str, np.ndarray], callback: Any, *, lent: Lent | None = None,
               **_: Any) -> None:
        index = inputs[SAMPLE_INDEX].copy()
        assert index.dtype == np.int64 and set(inputs) == {SAMPLE_INDEX}
        self.sent.append((index.tolist(), lent is not None))
        if lent is not None:
            self.pool.give_back(lent)
        output = index[:, None].astype(np.float32)
        callback(InferResult({"output": output}, {}, len(index), time.perf_counter_ns()))

    async def stop(self, drain: bool = True) -> None:
        return None


def test_with_samples_on_the_device_queries_send_indices_in_lent_blocks() -> None:
    service = IndexedService()
    queries = [np.array([13]), np.array([12, 5, 27]), np.arange(8, 17)]

    async def main() -> FakeSink:
        sut, sink = InProcessSut(service), FakeSink()  # type: ignore[arg-type]
        await sut.start(sink, timers=None)  # type: ignore[arg-type]
        for query_id, indices in enumerate(queries):
            sut.issue(query_id, indices)
        await sink.until(len(queries))
        return sink

    sink = asyncio.run(asyncio.wait_for(main(), 30))
    assert not sink.failures
    for query_id, indices in enumerate(queries):  # library index i is sample i mod size
        got = np.asarray(sink.done_calls[query_id]["output"]).reshape(-1)
        np.testing.assert_array_equal(got, indices % 10)
    assert service.sent == [([3], False), ([2, 5, 7], True),  # one sample: no block to fill
                            ([8, 9, 0, 1], True), ([2, 3, 4, 5], True), ([6], True)]
