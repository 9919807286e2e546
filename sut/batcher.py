"""Dynamic batching with Triton's semantics, counted in rows.

A request carries n >= 1 rows. Batches are formed by the workers themselves:
a free worker calls `next_batch()`, which picks requests into the forming
batch and returns it when it is due (as Triton waits for a model instance,
batches grow while every worker is busy, and no thread sits between a
worker and its next batch). Requests are taken by priority (lower number
first), FIFO within a level. A forming batch is due at once when it is full
(`max_batch_size` rows, or the next request would not fit), when a preferred
size can be reached (the largest one is taken), or else when its oldest
request has waited `max_queue_delay_us` since it was enqueued.

Per request the batcher stamps `enqueue_ns`, `pick_ns` (taken into the forming
batch) and the batch's `dispatch_ns`, so that queue wait is pick - enqueue and
batch formation is dispatch - pick: disjoint intervals. A request whose timeout
passes before dispatch is removed and failed with `RequestTimeout`, never run,
by a reaper thread that sleeps until the earliest deadline (so timeouts fire
while every worker is busy). Waiting uses `threading.Condition` timeouts,
precise to tens of microseconds.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from sut.errors import ConfigError, Overloaded, RequestTimeout, SutError

__all__ = ["Batch", "Batcher", "BatcherConfig", "Request", "answer"]

_log = logging.getLogger(__name__)
_QUEUED, _PICKED, _DISPATCHED, _DEAD = range(4)


@dataclass(frozen=True, slots=True)
class BatcherConfig:
    """Batcher knobs; names and meaning follow Triton's dynamic batcher."""

    max_batch_size: int = 8
    max_queue_delay_us: int = 100
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_size: int = 1024  # requests waiting to be dispatched; 0 = unbounded

    def __post_init__(self) -> None:
        for key in ("max_batch_size", "max_queue_delay_us", "max_queue_size"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(key, f"must be an integer, got {value!r}")
        if self.max_batch_size < 1:
            raise ConfigError("max_batch_size", f"must be >= 1, got {self.max_batch_size}")
        if self.max_queue_delay_us < 0:
            raise ConfigError("max_queue_delay_us", f"must be >= 0, got {self.max_queue_delay_us}")
        if self.max_queue_size < 0:
            raise ConfigError("max_queue_size", f"must be >= 0, got {self.max_queue_size}")
        sizes = self.preferred_batch_sizes
        if not isinstance(sizes, tuple | list) or not all(
            isinstance(s, int) and not isinstance(s, bool) and 1 <= s <= self.max_batch_size
            for s in sizes
        ):
            raise ConfigError(
                "preferred_batch_sizes",
                f"must be integers in [1, max_batch_size={self.max_batch_size}],"
                f" got {sizes!r}",
            )
        object.__setattr__(self, "preferred_batch_sizes", tuple(sorted(set(sizes))))

    def with_knobs(self, **knobs: Any) -> BatcherConfig:
        """A copy with `knobs` changed; ConfigError names an unknown knob or a bad value."""
        names = {f.name for f in dataclasses.fields(BatcherConfig)}
        for key in knobs:
            if key not in names:
                raise ConfigError(key, f"unknown batcher knob; known: {', '.join(sorted(names))}")
        return dataclasses.replace(self, **knobs)


class Request:
    """One queued request; `callback` gets an exception when the batcher fails it."""

    __slots__ = (
        "callback", "deadline_ns", "enqueue_ns", "inputs", "lent", "pick_ns", "priority",
        "rows", "seq", "state",
    )

    def __init__(
        self,
        inputs: dict[str, np.ndarray],
        rows: int,
        callback: Callable[[Any], None],
        priority: int,
        enqueue_ns: int,
        deadline_ns: int | None,
        seq: int,
        lent: Any = None,
    ) -> None:
        self.inputs = inputs
        self.lent = lent  # the pinned block `inputs` views, when the service lent one
        self.rows = rows
        self.callback = callback
        self.priority = priority
        self.enqueue_ns = enqueue_ns
        self.deadline_ns = deadline_ns
        self.seq = seq
        self.pick_ns = 0
        self.state = _QUEUED


@dataclass(slots=True)
class Batch:
    """Requests dispatched together, in order; rows are concatenated in this order."""

    requests: list[Request]
    rows: int
    dispatch_ns: int

    @property
    def first_pick_ns(self) -> int:
        """When a worker picked the batch's first request."""
        return self.requests[0].pick_ns


class Batcher:
    """Queues requests; each free worker takes its next batch with `next_batch()`."""

    def __init__(self, config: BatcherConfig) -> None:
        self._config = config
        lock = self._lock = threading.Lock()  # `with self._lock`: no Python-level wrapper
        self._due = threading.Condition(lock)  # free workers wait here for a batch
        self._timer = threading.Condition(lock)  # the reaper waits here for a deadline
        self._queues: dict[int, deque[Request]] = {}
        self._levels: list[int] = []
        self._queued = 0
        self._queued_rows = 0
        self._forming: list[Request] = []
        self._forming_rows = 0
        self._forming_since = 0  # when a worker picked the forming batch's first request
        self._deadlines: list[tuple[int, int, Request]] = []
        self._seq = itertools.count()
        self._closed = False
        self._idle = 0  # workers waiting in `next_batch`: a notify with none waiting is skipped
        self._reaper = threading.Thread(target=self._reap, name="sut-reaper", daemon=True)
        self.rejected = 0
        self.expired = 0

    @property
    def config(self) -> BatcherConfig:
        """The knobs in force."""
        return self._config

    @property
    def waiting(self) -> int:
        """Requests queued or in the forming batch."""
        with self._lock:
            return self._queued + len(self._forming)

    def start(self) -> None:
        """Start the reaper thread, which fails requests whose timeout passes in the queue."""
        self._reaper.start()

    def configure(self, **knobs: Any) -> BatcherConfig:
        """Change knobs while running; validated as a whole, applied at once."""
        with self._lock:
            self._config = self._config.with_knobs(**knobs)
            self._due.notify_all()
            return self._config

    def submit(
        self,
        inputs: dict[str, np.ndarray],
        rows: int,
        callback: Callable[[Any], None],
        priority: int = 0,
        timeout_ns: int | None = None,
        lent: Any = None,
    ) -> None:
        """Queue a request; raises `Overloaded` when the queue is full.

        A waiting worker is woken only when this request can make a batch due now: the
        first one waiting (the worker sets its timer from it), or enough rows for a full
        or preferred batch, or no queue delay at all; otherwise the worker's timer fires
        when the oldest request's delay has passed.
        """
        now = time.perf_counter_ns()
        deadline = None if timeout_ns is None else now + timeout_ns
        with self._lock:
            if self._closed:
                raise SutError("the batcher is stopped; request not queued")
            limit = self._config.max_queue_size
            if limit and self._queued + len(self._forming) >= limit:
                self.rejected += 1
                raise Overloaded(
                    f"queue full: {limit} requests waiting (max_queue_size={limit}); rejected"
                )
            req = Request(inputs, rows, callback, priority, now, deadline, next(self._seq), lent)
            cfg = self._config
            waiting_rows = self._queued_rows + self._forming_rows
            wake = (not waiting_rows or cfg.max_queue_delay_us == 0
                    or waiting_rows + rows >= cfg.max_batch_size
                    or bool(cfg.preferred_batch_sizes)
                    and waiting_rows + rows >= cfg.preferred_batch_sizes[0])
            queue = self._queues.get(priority)
            if queue is None:
                queue = self._queues[priority] = deque()
                bisect.insort(self._levels, priority)
            queue.append(req)
            self._queued += 1
            self._queued_rows += rows
            if deadline is not None:
                heapq.heappush(self._deadlines, (deadline, req.seq, req))
                if self._deadlines[0][2] is req:
                    self._timer.notify()
            if wake and self._idle:
                self._due.notify()

    def next_batch(self) -> Batch | None:
        """Block until a batch is due for the calling (free) worker; None once closed and empty."""
        with self._lock:
            while True:
                now = time.perf_counter_ns()
                batch, wake_ns = self._form(now)
                if batch is not None:
                    if self._queued and self._idle:
                        self._due.notify()  # another free worker may form the next one
                    return batch
                if self._closed and not self._queued:
                    return None
                self._idle += 1
                try:
                    self._due.wait(None if wake_ns is None else max(0, wake_ns - now) / 1e9)
                finally:
                    self._idle -= 1

    def try_batch(self) -> Batch | None:
        """The batch due now for the calling (free) worker, or None; never waits."""
        with self._lock:
            batch, _ = self._form(time.perf_counter_ns())
            if batch is not None and self._queued and self._idle:
                self._due.notify()  # another free worker may form the next one
            return batch

    def close(self, drain: bool = True) -> None:
        """Stop taking requests; leave what waits to the workers (drain) or fail it."""
        victims: list[Request] = []
        with self._lock:
            self._closed = True
            if not drain:
                victims = self._forming + list(self._live())
                for r in victims:
                    r.state = _DEAD
                self._queues.clear()
                self._levels.clear()
                self._forming, self._forming_rows, self._queued = [], 0, 0
                self._queued_rows = 0
            self._due.notify_all()
            self._timer.notify()
        for r in victims:
            answer(r, SutError("the service stopped before the request ran"))
        if self._reaper.is_alive():
            self._reaper.join()

    # -- reaper thread -----------------------------------------------------

    def _reap(self) -> None:
        while True:
            with self._timer:
                while not (expired := self._expire(time.perf_counter_ns())) and not self._closed:
                    first = self._deadlines[0][0] if self._deadlines else None
                    wait_ns = None if first is None else max(0, first - time.perf_counter_ns())
                    self._timer.wait(None if wait_ns is None else wait_ns / 1e9)
            for r in expired:
                answer(r, RequestTimeout(f"request expired after waiting {_waited_ms(r)} in queue"))
            if self._closed and not expired:
                return

    def _expire(self, now: int) -> list[Request]:
        out: list[Request] = []
        heap = self._deadlines
        while heap and (heap[0][0] <= now or heap[0][2].state > _PICKED):  # due, or stale
            req = heapq.heappop(heap)[2]
            if req.state == _QUEUED:
                self._queued -= 1
                self._queued_rows -= req.rows
            elif req.state == _PICKED:
                self._forming.remove(req)
                self._forming_rows -= req.rows
            else:
                continue
            req.state = _DEAD
            out.append(req)
        if out:
            self.expired += len(out)
        return out

    def _live(self) -> Iterator[Request]:
        for level in self._levels:
            for req in self._queues[level]:
                if req.state == _QUEUED:
                    yield req

    def _form(self, now: int) -> tuple[Batch | None, int | None]:
        """Pick what fits into the forming batch; return it when it is due, else its wake time."""
        cfg = self._config
        rows = self._forming_rows
        candidates: list[Request] = []
        full = False
        for req in self._live():
            if rows + req.rows > cfg.max_batch_size:
                if not self._forming and not candidates:  # oversized after a shrink: alone
                    candidates.append(req)
                full = True
                break
            candidates.append(req)
            rows += req.rows
            if rows == cfg.max_batch_size:
                full = True
                break
        take = len(candidates)
        if not full and cfg.preferred_batch_sizes:
            rows = self._forming_rows
            best = 0 if rows in cfg.preferred_batch_sizes else -1
            for i, req in enumerate(candidates):
                rows += req.rows
                if rows in cfg.preferred_batch_sizes:
                    best = i + 1
            if best >= 0:
                take, full = best, True
        self._pick(take, now)
        if not self._forming:
            return None, None
        due = self._forming[0].enqueue_ns + cfg.max_queue_delay_us * 1000
        if full or self._closed or now >= due:
            batch = Batch(self._forming, self._forming_rows, now)
            for req in batch.requests:
                req.state = _DISPATCHED
            self._forming, self._forming_rows = [], 0
            return batch, None
        return None, due

    def _pick(self, take: int, now: int) -> None:
        """Move the first `take` live requests, in order, into the forming batch.

        A batch starts forming when a worker picks its first request (`now`); a request
        that arrives while it forms joins it on arrival (its worker is not woken for it:
        `submit`), so its pick is stamped at its enqueue, as if the worker had woken."""
        for level in list(self._levels):
            queue = self._queues[level]
            while queue and (take > 0 or queue[0].state != _QUEUED):
                req = queue.popleft()
                if req.state != _QUEUED:
                    continue
                if not self._forming:
                    self._forming_since = now
                req.state, req.pick_ns = _PICKED, max(req.enqueue_ns, self._forming_since)
                self._forming.append(req)
                self._forming_rows += req.rows
                self._queued -= 1
                self._queued_rows -= req.rows
                take -= 1
            if not queue:
                del self._queues[level]
                self._levels.remove(level)
            if take == 0:
                return


def _waited_ms(req: Request) -> str:
    return f"{(time.perf_counter_ns() - req.enqueue_ns) / 1e6:.3f} ms"


def answer(req: Request, result: Any) -> None:
    """Call the request's callback with its result or exception; a raising callback is
    logged, never passed on, so it cannot take down a worker or the reaper."""
    try:
        req.callback(result)
    except Exception:  # noqa: BLE001 - the caller's code, not ours
        _log.exception("request callback raised")
