"""The LLM engine: a step loop on its own thread over the scheduler and the model runner.

    engine = LLMEngine.build("tiny-llm", EngineConfig(max_num_seqs=8)); engine.start()
    rid = engine.submit(encode("Hello"), SamplingParams(max_tokens=32), on_output)
    ...; engine.cancel(rid); engine.stop()

Each step: take new requests and cancellations, let the scheduler form the step (admit,
prefill chunks, decode one token for every running sequence), run it, append the sampled
tokens, retire finished sequences (their blocks freed at once), register newly full blocks
for prefix caching, and hand each request its `Delta` through its callback, on this thread;
an asyncio caller forwards it with `loop.call_soon_threadsafe`. A step's deltas go out while
the next step computes (the runner's `while_computing`), before the loop idles, and before
any request ends otherwise (cancel, error, stop); each keeps the time its tokens were read.
The waiting queue is bounded (`max_waiting`): one more request raises `Overloaded` (a 429 on
the wire).

Failures stay with their requests: a request that can never run (token ids outside the
vocabulary, non-finite sampling values) is refused by `submit`; a step whose run raises ends
only the requests in it (reason `error`), and the engine goes on. Only a failure of the loop
itself, or `MAX_FAILED_STEPS` failed steps in a row (a lost device), stops the engine: every
request then ends with the error, `alive` turns False, `failure` says why, and each callback
given to `watch` is called once.

`observer`, when given, sees every step (`step(record)`) and every finished request
(`finished(timings, token_ns, reason)`): the metrics hook. The last `trace_steps` step records are
kept for the per-step trace.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from collections.abc import Sequence as Seq
from typing import Any, Protocol

import torch

from sut.errors import InvalidInput, ModelLoadError, Overloaded, SutError
from sut.llm.blocks import BlockManager, chain_hash
from sut.llm.config import EngineConfig
from sut.llm.model import kv_shape, load_causal_model
from sut.llm.runner import ModelRunner, default_kv_blocks, dtype_of, resolve_device
from sut.llm.sampler import is_greedy
from sut.llm.scheduler import Scheduler, StepPlan
from sut.llm.sequence import Delta, RequestTimings, SamplingParams, Sequence
from sut.llm.tokenizer import BOS

__all__ = ["MAX_FAILED_STEPS", "EngineObserver", "LLMEngine"]

_log = logging.getLogger(__name__)
MAX_FAILED_STEPS = 3


class EngineObserver(Protocol):
    """What the metrics see (called on the engine thread)."""

    def step(self, record: dict[str, Any]) -> None:
        """One step ran."""

    def finished(self, timings: RequestTimings, token_ns: Seq[int], reason: str) -> None:
        """A request ended for `reason`; `token_ns` stamps each output token."""


class LLMEngine:
    """Continuous (or static) batching over a paged KV cache, on one thread."""

    def __init__(self, model_name: str, runner: ModelRunner, config: EngineConfig,
                 max_model_len: int, observer: EngineObserver | None = None) -> None:
        self.model_name = model_name
        self.config = config
        self.runner = runner
        self.max_model_len = max_model_len
        self.blocks = BlockManager(runner.num_blocks, config.block_size,
                                   config.enable_prefix_caching)
        self.scheduler = Scheduler(config, self.blocks)
        self.observer = observer
        self.trace: deque[dict[str, Any]] = deque(maxlen=config.trace_steps)
        self.steps = 0
        self._ids = itertools.count(1)
        self._seeds = random.Random(config.seed)
        self._lock = threading.Condition()
        self._inbox: list[Sequence] = []
        self._cancels: list[int] = []
        self._live: dict[int, Sequence] = {}
        self._stopping = False
        self._thread: threading.Thread | None = None
        self.vocab_size = kv_shape(runner.model).vocab_size
        self.failure: str | None = None
        self._failed_steps = 0
        self._watchers: list[Callable[[str | None], None]] = []
        self._ended = False
        self._unsent: list[tuple[Sequence, int]] = []  # (sequence, read ns) still to emit
        runner.while_computing = self._send

    @classmethod
    def build(cls, model_name: str, config: EngineConfig,
              observer: EngineObserver | None = None) -> LLMEngine:
        """Load the model on its device and size the KV cache."""
        device = resolve_device(config.device)
        dtype = dtype_of(config.dtype)
        model = load_causal_model(model_name, config.seed, str(device), dtype)
        positions = kv_shape(model).max_positions
        max_len = min(config.max_model_len or positions, positions)
        blocks = config.num_kv_blocks or default_kv_blocks(
            model, device, config.block_size, dtype, config.max_num_seqs, max_len,
            config.gpu_memory_utilization)
        runner = ModelRunner(model, device, blocks, config.block_size, dtype,
                             config.max_num_seqs, max_len, config.cuda_graphs)
        return cls(model_name, runner, config, max_len, observer)

    # -- the caller's side (any thread) --------------------------------------------------

    def start(self) -> None:
        """Start the step loop and warm the model up with one short request;
        ModelLoadError when the warm-up fails."""
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="llm-engine", daemon=True)
        observer, self.observer = self.observer, None  # the warm-up is not served work
        self._thread.start()
        warm = threading.Event()
        ended: list[Delta] = []

        def on_warm(delta: Delta) -> None:
            if delta.finished:
                ended.append(delta)
                warm.set()

        self.submit([BOS, 65], SamplingParams(max_tokens=2, ignore_eos=True), on_warm)
        if not warm.wait(300) or ended[0].finish_reason != "length":
            reason = ended[0].error if ended else "no answer within 300 s"
            self.stop()
            raise ModelLoadError(f"{self.model_name}: the warm-up failed: {reason}")
        self.steps = 0
        self.trace.clear()
        self.blocks.queries = self.blocks.hits = 0
        self.observer = observer

    def stop(self) -> None:
        """End the loop; requests still queued or running finish with reason `abort`."""
        with self._lock:
            self._stopping = True
            self._lock.notify()
        if self._thread is not None:
            self._thread.join(60)

    @property
    def alive(self) -> bool:
        """The step loop runs and takes requests (started, not stopped, not failed)."""
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stopping

    def watch(self, on_stopped: Callable[[str | None], None]) -> None:
        """Call `on_stopped(failure)` once when the loop ends (failure None: `stop` was
        asked); at once when it has already ended. Called on the engine thread."""
        with self._lock:
            ended = self._ended
            if not ended:
                self._watchers.append(on_stopped)
        if ended:
            on_stopped(self.failure)

    @property
    def num_waiting(self) -> int:
        """Requests queued (not yet admitted, or preempted)."""
        return len(self.scheduler.waiting) + len(self._inbox)

    @property
    def num_running(self) -> int:
        """Sequences holding KV blocks and a seat."""
        return len(self.scheduler.running)

    def submit(self, prompt: list[int], params: SamplingParams,
               on_output: Callable[[Delta], None], priority: int = 0) -> int:
        """Queue a request; its id. InvalidInput for one that can never run, Overloaded when
        `max_waiting` requests already wait."""
        self._check(prompt, params)
        if not is_greedy(params) and params.seed is None:
            params = dataclasses.replace(params, seed=self._seeds.getrandbits(31))
        with self._lock:
            if self._stopping:
                raise SutError("the engine is stopping")
            if self.num_waiting >= self.config.max_waiting:
                raise Overloaded(f"{self.config.max_waiting} requests already wait;"
                                 " retry later")
            seq = Sequence(next(self._ids), list(prompt), params, on_output,
                           time.perf_counter_ns(), priority)
            self._inbox.append(seq)
            self._lock.notify()
        return seq.request_id

    def cancel(self, request_id: int) -> None:
        """Drop a request (a client that went away); its blocks are freed at the next step."""
        with self._lock:
            self._cancels.append(request_id)
            self._lock.notify()

    def _check(self, prompt: list[int], params: SamplingParams) -> None:
        if not prompt:
            raise InvalidInput("the prompt is empty")
        if params.max_tokens < 1:
            raise InvalidInput(f"max_tokens must be >= 1, got {params.max_tokens}")
        if len(prompt) >= self.max_model_len:
            raise InvalidInput(f"the prompt has {len(prompt)} tokens; this model takes at most"
                               f" {self.max_model_len - 1} (max_model_len {self.max_model_len})")
        if not self.config.enable_chunked_prefill \
                and len(prompt) > self.config.max_num_batched_tokens:
            raise InvalidInput(f"the prompt has {len(prompt)} tokens, over"
                               f" max_num_batched_tokens {self.config.max_num_batched_tokens}"
                               " without chunked prefill")
        longest = min(len(prompt) + params.max_tokens, self.max_model_len)
        if self.blocks.blocks_for(longest) > self.blocks.num_blocks:
            raise InvalidInput(f"{longest} tokens need more than the"
                               f" {self.blocks.num_blocks} KV blocks of the cache")
        if not (0 <= params.temperature < math.inf and 0 < params.top_p <= 1) \
                or params.top_k < 0 or params.min_tokens < 0:
            raise InvalidInput("want 0 <= temperature < inf, 0 < top_p <= 1, top_k >= 0,"
                               " min_tokens >= 0")
        if min(prompt) < 0 or max(prompt) >= self.vocab_size:
            raise InvalidInput(f"prompt: token ids must be in [0, {self.vocab_size}),"
                               f" got {min(prompt)}..{max(prompt)}")

    # -- the engine thread ---------------------------------------------------------------

    def _loop(self) -> None:
        try:
            while self._intake():
                self._step()
        except Exception as exc:  # noqa: BLE001 (every request learns the engine died)
            _log.exception("the engine loop failed; every request ends with an error")
            self.failure = f"{type(exc).__name__}: {exc}"
        self._fail_all(self.failure)
        with self._lock:
            self._ended = True
            watchers, self._watchers = self._watchers, []
        for on_stopped in watchers:
            on_stopped(self.failure)

    def _intake(self) -> bool:
        """Take new requests and cancellations; wait while idle; False once stopping."""
        if not self._live:
            self._send()  # nothing will compute soon
        with self._lock:
            while not (self._inbox or self._cancels or self._stopping or self._live):
                self._lock.wait()
            if self._stopping:
                return False
            inbox, self._inbox = self._inbox, []
            cancels, self._cancels = self._cancels, []
        for seq in inbox:
            self._live[seq.request_id] = seq
            self.scheduler.add(seq)
        for request_id in cancels:
            cancelled = self._live.pop(request_id, None)
            if cancelled is not None:
                self.scheduler.remove(cancelled)
                self._finish(cancelled, "abort", time.perf_counter_ns())
        return True

    def _step(self) -> None:
        began = time.perf_counter_ns()
        plan = self.scheduler.schedule()
        if not plan.work:
            self._send()
            if self._live and not self.scheduler.running and not plan.preempted:
                raise SutError("no request can be scheduled: the KV cache is too small")
            return
        for seq, _ in plan.work:
            if not seq.scheduled_ns:
                seq.scheduled_ns = began
        try:
            picked, forward_ns = self.runner.step(plan.work)
        except Exception as exc:  # noqa: BLE001 (the step's requests fail, not the engine)
            self._fail_step(plan, exc)
            return
        self._failed_steps = 0
        now = time.perf_counter_ns()
        tokens = iter(picked)
        for seq, count in plan.work:
            token = next(tokens) if seq.computed + count == seq.num_tokens else None
            if seq.request_id not in self._live:
                continue  # dropped while the step ran (its previous delta failed to send)
            try:
                self._advance(seq, count, token, now)
            except Exception as exc:  # noqa: BLE001 (one request's failure is its own)
                _log.exception("request %d failed after its step", seq.request_id)
                self._drop(seq, f"{type(exc).__name__}: {exc}")
        self._record(plan, began, forward_ns)

    def _advance(self, seq: Sequence, count: int, token: int | None, now: int) -> None:
        """Count `seq`'s computed tokens, take its sampled `token` (None while its prompt is
        not all computed), retire it if done; its delta goes out with the step's others
        (`_send`, while the next step computes)."""
        seq.computed += count
        self._register_full_blocks(seq)
        if token is not None:
            seq.append(token, now, self.max_model_len)
            if seq.finish_reason is not None:
                self._live.pop(seq.request_id, None)
                self.scheduler.remove(seq)
        self._unsent.append((seq, now))

    def _fail_step(self, plan: StepPlan, exc: Exception) -> None:
        """End every request of a step whose run raised; stop after MAX_FAILED_STEPS."""
        self._failed_steps += 1
        error = f"{type(exc).__name__}: {exc}"
        _log.error("a step of %d requests failed (%d in a row): %s", len(plan.work),
                   self._failed_steps, error)
        for seq, _ in plan.work:
            self._drop(seq, error)
        if self._failed_steps >= MAX_FAILED_STEPS:
            raise SutError(f"{self._failed_steps} steps failed in a row; last: {error}")

    def _drop(self, seq: Sequence, error: str) -> None:
        """End one request with `error` and free its blocks."""
        if self._live.pop(seq.request_id, None) is not None:
            self.scheduler.remove(seq)
            self._finish(seq, "error", time.perf_counter_ns(), error)

    def _register_full_blocks(self, seq: Sequence) -> None:
        size = self.blocks.block_size
        full = seq.computed // size
        while len(seq.block_hashes) < full:
            index = len(seq.block_hashes)
            parent = seq.block_hashes[-1] if seq.block_hashes else b""
            block_hash = chain_hash(parent, seq.token_at(index * size, (index + 1) * size))
            seq.block_hashes.append(block_hash)
            self.blocks.register(seq.blocks[index], block_hash)

    def _send(self) -> None:
        """Emit the deltas of the last step run (a finished request's observer first)."""
        unsent, self._unsent = self._unsent, []
        for seq, now in unsent:
            try:
                if seq.finish_reason is not None:
                    self._finished(seq, now)
                delta = seq.delta(now, self.config.stream_interval)
                if delta is not None:
                    seq.on_output(delta)
            except Exception as exc:  # noqa: BLE001 (one request's failure is its own)
                _log.exception("request %d failed sending its output", seq.request_id)
                self._drop(seq, f"{type(exc).__name__}: {exc}")

    def _finish(self, seq: Sequence, reason: str, now: int, error: str | None = None) -> None:
        self._send()  # a request's last delta follows every one it is owed
        seq.finish_reason = reason
        seq.on_output(Delta(seq.request_id, "", 0, len(seq.prompt), len(seq.output), now,
                            reason, error, seq.timings(now), seq.cached_tokens))
        self._finished(seq, now)

    def _finished(self, seq: Sequence, now: int) -> None:
        if self.observer is not None:
            self.observer.finished(seq.timings(now), seq.token_ns, seq.finish_reason or "abort")

    def _fail_all(self, error: str | None) -> None:
        self._send()
        with self._lock:
            self._stopping = True
            inbox, self._inbox = self._inbox, []
        now = time.perf_counter_ns()
        for seq in [*self._live.values(), *inbox]:
            self.scheduler.remove(seq)
            self._finish(seq, "abort" if error is None else "error", now, error)
        self._live.clear()

    def _record(self, plan: StepPlan, began: int, forward_ns: int) -> None:
        self.steps += 1
        decodes = sum(1 for seq, n in plan.work if n == 1 and seq.output)
        record = {
            "step": self.steps, "start_ns": began,
            "duration_ns": time.perf_counter_ns() - began, "forward_ns": forward_ns,
            "batched_tokens": sum(n for _, n in plan.work), "decode_seqs": decodes,
            "prefill_seqs": len(plan.work) - decodes, "admitted": plan.admitted,
            "preempted": len(plan.preempted), "running": self.num_running,
            "waiting": len(self.scheduler.waiting), "kv_usage": round(self.blocks.usage, 4),
        }
        self.trace.append(record)
        if self.observer is not None:
            self.observer.step(record)

    def describe(self) -> dict[str, Any]:
        """The model, device and knobs in force."""
        device = self.runner.device
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        return {"model": self.model_name, "device": str(device), "device_name": name,
                "num_kv_blocks": self.blocks.num_blocks, "max_model_len": self.max_model_len,
                "decode_path": self.runner.decode_path, **dataclasses.asdict(self.config)}
