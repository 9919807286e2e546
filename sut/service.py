"""The in-process inference API, shared by the loadgen adapter and the servers.

`InferenceService` owns one model: it loads it (timed), places a copy per
device at the precision the device supports, measures the first inference,
and warms up through the real path: its `Instances` (serial workers, or pipelines
with CUDA graphs on CUDA) each take their next batch from a `Batcher`. It lends input
blocks (`lend`; pinned on CUDA): a caller that gathers a request's rows into one and
submits it with `lent=` has its inputs read from there (sent to the GPU) with no other
host copy. Started `in_process=True` (loadgen's in-process adapter) on CUDA, it may copy
the dataset's inputs to each GPU first (`start_from_device`, `sut.devicedata`): then a
request is `{SAMPLE_INDEX: int64 indices}` (`lend_indices` lends pinned blocks of them),
and its rows are gathered on the GPU.
Per request it reports durations in ns, disjoint and in order, under the component
names of `oipwire.timing` (the vocabulary the servers send and loadgen records):

    queue            enqueue -> picked into a forming batch
    batch_formation  picked -> batch dispatched
    h2d              staging (pinned on CUDA) and host-to-device copy (of the indices,
                     and the gather on the GPU, when samples start on the device)
    compute          the forward pass, with precision casts
    d2h              device-to-host copy of the outputs
    postprocess      end of d2h -> this request's `done_ns` (slicing, earlier callbacks)
    server_total     enqueue -> done_ns (covers the handoffs between the phases too)
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from oipwire.datatypes import TensorSpec, numpy_dtype
from oipwire.timing import BATCH_FORMATION, COMPUTE, POSTPROCESS, QUEUE, SERVER_TOTAL
from sut.batcher import Batch, Batcher, BatcherConfig, answer
from sut.devicedata import (
    SAMPLE_INDEX,
    DeviceSamples,
    SamplesDecision,
    index_rows,
    place_samples,
)
from sut.errors import InvalidInput, ModelLoadError, SutError
from sut.instances import Instances, choose
from sut.models import LoadedModel, check_model, load_model
from sut.options import ServiceOptions, parse_options
from sut.staging import Lent, held_apart, request_parts, to_block
from sut.workers import Executor, cpu_cores, place, plan_workers, resolve_precision

__all__ = ["InferResult", "InferenceService", "ModelMetadata", "build_service"]

Callback = Callable[[Any], None]  # receives an InferResult or an exception


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    """What a client needs to call the model (OIP model metadata)."""

    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    max_batch_size: int


@dataclass(frozen=True, slots=True)
class InferResult:
    """One request's outputs (its rows only), component durations, batch rows, finish time."""

    outputs: dict[str, np.ndarray]
    timings_ns: dict[str, int]
    batch_size: int
    done_ns: int


class InferenceService:
    """One model served in-process; see the module docstring for the timings."""

    def __init__(self, model: str, options: ServiceOptions | None = None) -> None:
        self._model_name = model
        self._options = options or ServiceOptions()
        cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
        o = self._options
        self._plan = plan_workers(o.device, instances=o.instances, workers=o.workers,
                                  threads=o.threads, cores=cpu_cores(), cuda_count=cuda)
        resolve_precision(o.precision, torch.device("cpu"), False)  # validates the name
        self._batcher_config = o.batcher
        self._loaded: LoadedModel | None = None
        self._batcher: Batcher | None = None
        self._instances: Instances | None = None
        self._ready = False
        self._precision = ""
        self._apart: dict[str, torch.dtype] = {}  # inputs lent in another dtype than the spec's
        self._output_names: tuple[str, ...] = ()
        self._fallback = ""
        self._cold: dict[str, int] = {}
        self._lock = threading.Lock()
        self._ok = self._failed = self._rows = self._queue_ns = self._compute_ns = 0
        self._batch_sizes: Counter[int] = Counter()
        self._in_process = False
        self._samples = SamplesDecision(False, "not started")
        self._samples_bytes = 0  # per device, when the samples are on the devices
        self._samples_size = 0  # sample indices are in [0, this); 0: requests carry rows

    # -- lifecycle -----------------------------------------------------------

    @property
    def ready(self) -> bool:
        """True between a successful `start` and `stop`."""
        return self._ready

    @property
    def metadata(self) -> ModelMetadata:
        """Names, datatypes and shapes; available once started."""
        m = self._model()
        return ModelMetadata(m.name, ("1",), m.platform, m.inputs, m.outputs,
                             self._config_max_batch())

    async def start(self, *, in_process: bool = False) -> None:
        """Load (timed), place, run a first inference (timed), start workers, warm up.
        `in_process`: the caller is in this process and sends samples of the model's
        dataset (loadgen's in-process adapter), so they may start on the device."""
        if self._loaded is not None:
            raise SutError("the service was already started")
        self._in_process = in_process
        await asyncio.to_thread(_in_own_thread, self._start)
        self._ready = True

    async def stop(self, drain: bool = True) -> None:
        """Stop taking requests; run what waits (drain) or fail it; join all threads."""
        self._ready = False
        await asyncio.to_thread(self._shutdown, drain)

    # -- requests ------------------------------------------------------------

    async def infer(
        self, inputs: dict[str, np.ndarray], *, priority: int = 0, timeout_ns: int | None = None
    ) -> InferResult:
        """Run one request; raises Overloaded, RequestTimeout, InvalidInput or SutError."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[InferResult] = loop.create_future()

        def settle(result: Any) -> None:
            if future.done():
                return
            if isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

        def callback(result: Any) -> None:
            try:
                loop.call_soon_threadsafe(settle, result)
            except RuntimeError:  # the loop closed; nobody waits any more
                pass

        self.submit(inputs, callback, priority=priority, timeout_ns=timeout_ns)
        return await future

    def lend(self, rows: int) -> Lent | None:
        """An input block of `rows` rows (pinned on CUDA) to fill and submit with `lent=`;
        None when there is none to lend (then submit plain arrays)."""
        instances = self._instances
        pool = instances.pool if instances is not None else None
        return pool.lend(rows) if pool is not None else None

    def lendable(self, block: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`block` (inputs in their specs' dtypes, e.g. from `sample_inputs`) in the dtypes
        of the blocks `lend` gives (`Lent.arrays`: a floating input held at the model's
        precision); convert a dataset once, then gather from it into lent blocks."""
        instances = self._instances
        if instances is None or instances.pool is None:
            raise SutError("the service is not running")
        pool = instances.pool
        if not pool.shapes_fixed:  # nothing is lent: keep the block as it is
            return dict(block)
        return {name: to_block(array, pool.dtypes[name]) for name, array in block.items()}

    @property
    def samples_on_device(self) -> bool:
        """Whether the dataset is on the devices: then a request is `{SAMPLE_INDEX: int64
        indices in [0, dataset_size)}`, one row each, and nothing else is taken."""
        return self._samples_size > 0

    def lend_indices(self, rows: int) -> Lent | None:
        """A block of `rows` sample indices (pinned) to fill and submit as `lent.arrays` with
        `lent=`, when the samples are on the device; else None."""
        instances = self._instances
        pool = instances.index_pool if instances is not None else None
        return pool.lend(rows) if pool is not None else None

    def submit(
        self,
        inputs: dict[str, np.ndarray],
        callback: Callback,
        *,
        priority: int = 0,
        timeout_ns: int | None = None,
        lent: Lent | None = None,
    ) -> None:
        """Queue a request; `callback` later gets its InferResult or exception, in a sut thread.

        `lent`: the block from `lend` that `inputs` are (its `arrays`); it goes back to
        the service once the request is answered, or here when the request is refused.
        Raises at once (never via the callback) InvalidInput, Overloaded, or SutError
        when the service is not running.
        """
        batcher = self._batcher
        try:
            if not self._ready or batcher is None:
                raise SutError("the service is not running")
            rows = self._validate(inputs, lent)
            if timeout_ns is not None and timeout_ns <= 0:
                raise InvalidInput(f"timeout_ns must be > 0, got {timeout_ns}")
            if lent is not None:
                callback = self._returning(lent, callback)
            batcher.submit(inputs, rows, callback, priority, timeout_ns, lent)
        except SutError:
            if lent is not None:
                self._give_back(lent)
            raise

    def _returning(self, lent: Lent, callback: Callback) -> Callback:
        """`lent` back to the pool (the device has read it by then), then `callback`: a
        caller who got its answer may borrow the same block again."""

        def answered(result: Any) -> None:
            self._give_back(lent)
            callback(result)

        return answered

    def _give_back(self, lent: Lent) -> None:
        instances = self._instances
        if instances is None:
            return
        pool = instances.index_pool if SAMPLE_INDEX in lent.arrays else instances.pool
        if pool is not None:
            pool.give_back(lent)

    @property
    def batcher_config(self) -> BatcherConfig:
        """The batcher knobs in force."""
        return self._batcher_config

    def configure(self, **knobs: Any) -> BatcherConfig:
        """Retune batcher knobs (max_batch_size, max_queue_delay_us, ...) live; validated
        as a whole (ConfigError names a bad knob); returns the knobs in force."""
        if self._batcher is not None:
            self._batcher_config = self._batcher.configure(**knobs)
        else:
            self._batcher_config = self._batcher_config.with_knobs(**knobs)
        return self._batcher_config

    # -- reporting -----------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters since warm-up; ns totals of queue (per request) and compute (per batch)."""
        b = self._batcher
        with self._lock:
            return {
                "model": self._model_name,
                "requests": {"ok": self._ok, "failed": self._failed,
                             "rejected": b.rejected if b else 0,
                             "timeout": b.expired if b else 0},
                "rows_ok": self._rows,
                "waiting": b.waiting if b else 0,
                "queue_ns_total": self._queue_ns,
                "compute_ns_total": self._compute_ns,
                "batches": sum(self._batch_sizes.values()),
                "batch_sizes": dict(sorted(self._batch_sizes.items())),
            }

    def describe(self) -> dict[str, Any]:
        """The conditions a result must carry: model, device, precision, workers, knobs."""
        o, m = self._options, self._loaded
        return {
            "model": self._model_name,
            "platform": m.platform if m else None,
            "device": sorted(set(self._plan.devices)),
            "precision": self._precision or None,
            "precision_requested": o.precision,
            "precision_note": self._fallback or None,
            "workers": len(self._plan.devices),
            "instances": len(self._plan.devices) // len(set(self._plan.devices)),
            "threads_per_worker": self._plan.threads_per_worker,
            **(self._instances.describe() if self._instances else {}),
            "samples": (f"device ({self._samples_bytes / (1 << 20):.1f} MiB per GPU)"
                        if self.samples_on_device else "host"),
            "samples_note": self._samples.reason,
            "batcher": dataclasses.asdict(self._batcher_config),
            "cold_start": dict(self._cold),
            "seed": o.seed,
            "dataset_size": m.dataset.size if m else None,
            "model_info": dict(m.info) if m else {},
            "torch": torch.__version__,
            "cuda_devices": [torch.cuda.get_device_name(d) for d in sorted(set(self._plan.devices))
                             if d.startswith("cuda")],
        }

    def sample_inputs(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The dataset's inputs for these indices (one row each); available once started."""
        return self._model().dataset.sample_inputs(indices)

    def labels(self, indices: np.ndarray) -> np.ndarray | None:
        """The dataset's labels for these indices, or None when it has none."""
        return self._model().dataset.labels(indices)

    @property
    def dataset_size(self) -> int:
        """Number of samples the dataset holds; valid indices are [0, dataset_size)."""
        return self._model().dataset.size

    # -- internals -----------------------------------------------------------

    def _model(self) -> LoadedModel:
        if self._loaded is None:
            raise SutError("the service has not been started; the model is not loaded")
        return self._loaded

    def _config_max_batch(self) -> int:
        return self._batcher_config.max_batch_size

    def _validate(self, inputs: Mapping[str, np.ndarray], lent: Lent | None = None) -> int:
        """The request's rows; InvalidInput when its inputs do not fit the model. A lent
        block's own arrays have the specs' names and shapes by construction, each in its
        block dtype (a floating input at the model's precision, see `lendable`)."""
        limit = self._config_max_batch()
        if self._samples_size:
            return index_rows(inputs, limit, self._samples_size)
        if lent is not None and inputs is lent.arrays:
            if lent.rows > limit:
                raise InvalidInput(f"{lent.rows} rows exceed max_batch_size={limit}")
            return lent.rows
        specs = self._model().inputs
        if len(inputs) != len(specs) or any(s.name not in inputs for s in specs):
            raise InvalidInput(f"want inputs {[s.name for s in specs]}, got {sorted(inputs)}")
        rows = -1
        for spec in specs:
            array = inputs[spec.name]
            if not isinstance(array, np.ndarray) or array.dtype != numpy_dtype(spec.datatype):
                got = getattr(array, "dtype", type(array).__name__)
                raise InvalidInput(f"{spec.name}: want a {spec.datatype} array, got {got}")
            if array.ndim != len(spec.shape) or array.shape[1:] != spec.shape[1:]:
                raise InvalidInput(f"{spec.name}: want shape {spec.shape}, got {array.shape}")
            if array.shape[0] < 1 or rows not in (-1, array.shape[0]):
                raise InvalidInput(f"{spec.name}: batch dim {array.shape[0]}; must be >= 1, alike")
            rows = array.shape[0]
        if rows > limit:
            raise InvalidInput(f"{rows} rows exceed max_batch_size={limit}")
        return rows

    def _place_samples(self, loaded: LoadedModel, precision: str
                       ) -> dict[str, DeviceSamples] | None:
        """The dataset's inputs on each device when `decide` says so (timed), else None."""
        began = time.perf_counter_ns()
        try:
            self._samples, placed = place_samples(
                self._options.start_from_device, sorted(set(self._plan.devices)),
                loaded.inputs, lambda: loaded.dataset.sample_inputs(np.arange(loaded.dataset.size)),
                precision, in_process=self._in_process)
        except torch.OutOfMemoryError as exc:
            raise ModelLoadError(f"start_from_device: the dataset does not fit on the device "
                                 f"({exc}); start_from_device=false keeps it on the host") from exc
        if placed:
            self._cold["samples_to_device_ns"] = time.perf_counter_ns() - began
            self._samples_bytes = next(iter(placed.values())).nbytes
        return placed

    def _shutdown(self, drain: bool) -> None:
        if self._batcher is not None:
            self._batcher.close(drain)
        if self._instances is not None:
            self._instances.join()

    def _start(self) -> None:
        o = self._options
        began = time.perf_counter_ns()
        try:
            loaded = load_model(self._model_name, o.model_options, o.seed)
        except SutError:
            raise
        except Exception as exc:
            raise ModelLoadError(f"cannot load {self._model_name!r}: {exc!r}") from exc
        sample = loaded.dataset.sample_inputs(np.zeros(1, dtype=np.int64))
        placed = place(loaded.module, sorted(set(self._plan.devices)), o.precision,
                       loaded.inputs, loaded.outputs, sample)
        self._cold["load_ns"] = time.perf_counter_ns() - began - placed.first_inference_ns
        self._cold["first_inference_ns"] = placed.first_inference_ns
        precision, copies, self._fallback = placed.precision, placed.copies, placed.note
        self._precision, self._loaded = precision, loaded
        self._apart = held_apart(loaded.inputs, precision)
        self._output_names = tuple(s.name for s in loaded.outputs)
        max_rows = self._config_max_batch()
        rows = loaded.dataset.sample_inputs(np.arange(max_rows) % loaded.dataset.size)
        devices = self._plan.devices
        samples = self._place_samples(loaded, precision)
        choice = choose(devices[0].startswith("cuda"), o.pipelined, o.cuda_graphs,
                        o.completion_thread)
        building = time.perf_counter_ns()
        instances = Instances(copies, devices, precision, loaded.inputs, loaded.outputs, choice,
                              self._plan.threads_per_worker, max_rows,
                              [rows[s.name] for s in loaded.inputs], samples)
        if samples is not None:
            self._samples_size = loaded.dataset.size
        self._cold["instances_ns"] = time.perf_counter_ns() - building  # graphs captured
        batcher = Batcher(self._batcher_config)
        self._batcher, self._instances = batcher, instances
        batcher.start()
        instances.start(batcher.next_batch, batcher.try_batch, self._run_batch, self._deliver,
                        self._fail)
        warm = time.perf_counter_ns()
        try:
            self._warm_up(batcher, instances.in_flight)
        except Exception:
            self._shutdown(False)
            raise
        self._cold["warmup_ns"] = time.perf_counter_ns() - warm
        self._cold["start_ns"] = time.perf_counter_ns() - began

    def _warm_up(self, batcher: Batcher, workers: int) -> None:
        """Run `warmup` rounds of full and one-row requests through the real path."""
        model, rounds = self._model(), self._options.warmup
        every = np.arange(self._config_max_batch()) % model.dataset.size
        full = ({SAMPLE_INDEX: every} if self.samples_on_device
                else model.dataset.sample_inputs(every))
        one = {k: v[:1] for k, v in full.items()}
        results: list[Any] = []
        done = threading.Semaphore(0)

        def collect(result: Any) -> None:
            results.append(result)
            done.release()

        for _ in range(rounds):
            for inputs in (full, one):
                for _ in range(workers):
                    batcher.submit(inputs, len(next(iter(inputs.values()))), collect)
                for _ in range(workers):
                    done.acquire()
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            raise ModelLoadError(f"warm-up failed: {errors[0]!r}")
        with self._lock:
            self._ok = self._rows = self._queue_ns = self._compute_ns = 0
            self._batch_sizes.clear()

    def _run_batch(self, executor: Executor, batch: Batch) -> None:
        """In a serial worker thread: run the batch, then deliver it."""
        requests = batch.requests
        try:
            lent = requests[0].lent if len(requests) == 1 else None
            parts = ({} if lent is not None  # read as it is: nothing to join
                     else {name: request_parts(requests, name, self._apart)
                           for name in requests[0].inputs})
            outputs, phase = executor.run(parts, batch.rows, lent)
        except Exception as exc:  # noqa: BLE001 - any model error fails this batch only
            self._fail(batch, exc)
            return
        self._deliver(batch, outputs, phase)

    def _fail(self, batch: Batch, exc: BaseException) -> None:
        """Fail every request of a batch whose inference failed."""
        error = SutError(f"inference failed on a batch of {batch.rows} rows: {exc!r}")
        with self._lock:
            self._failed += len(batch.requests)
        for r in batch.requests:
            answer(r, error)

    def _deliver(self, batch: Batch, outputs: list[np.ndarray], phase: dict[str, int]) -> None:
        """Slice each request's rows of the batch's outputs and call it back. Runs once per
        batch on the instance's thread, so it is kept tight (output names kept from start,
        one lock, no generator)."""
        requests = batch.requests
        names = self._output_names
        landed = time.perf_counter_ns()
        dispatch, rows = batch.dispatch_ns, batch.rows
        queued = 0
        for r in requests:
            queued += r.pick_ns - r.enqueue_ns
        with self._lock:  # before the callbacks, so a caller who got a result sees it counted
            self._ok += len(requests)
            self._rows += rows
            self._queue_ns += queued
            self._compute_ns += phase[COMPUTE]
            self._batch_sizes[rows] += 1
        offset = 0
        for r in requests:
            end = offset + r.rows
            outs = {n: a[offset:end] for n, a in zip(names, outputs, strict=True)}
            offset = end
            done = time.perf_counter_ns()
            timings = {QUEUE: r.pick_ns - r.enqueue_ns, BATCH_FORMATION: dispatch - r.pick_ns,
                       **phase, POSTPROCESS: done - landed, SERVER_TOTAL: done - r.enqueue_ns}
            answer(r, InferResult(outs, timings, rows, done))


def _in_own_thread(work: Callable[[], None]) -> None:
    """Run `work` in a new thread that ends with it; its exception is raised here.

    Loading and the first inference run torch ops at the default thread count, and a
    thread that ran a parallel op keeps an OpenMP pool while it lives. With more pool
    threads than cores, libgomp throttles every worker's spin-wait between parallel
    regions (mlp at batch 256, 2 intra-op threads: 744 -> 1289 us per forward).
    """
    failure: list[BaseException] = []

    def run() -> None:
        try:
            work()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="sut-start", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def build_service(model: str, options: Mapping[str, str]) -> InferenceService:
    """A service for `--sut builtin:MODEL,key=value,...`; ConfigError names a bad key."""
    parsed = parse_options(options)
    check_model(model, parsed.model_options)
    return InferenceService(model, parsed)
