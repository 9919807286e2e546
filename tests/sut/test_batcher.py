"""The dynamic batcher alone: test threads play the workers, so nothing sleeps."""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sut.batcher import Batch, Batcher, BatcherConfig
from sut.errors import ConfigError, Overloaded, RequestTimeout, SutError

WAIT_S = 5.0  # bound on any wait for something that should happen promptly
MS = 1_000_000


class Harness:
    """A batcher whose workers are threads that each take one batch into a queue."""

    def __init__(self, **knobs: Any) -> None:
        self.batches: queue.Queue[Batch | None] = queue.Queue()
        self.batcher = Batcher(BatcherConfig(**knobs))
        self.batcher.start()
        self.failures: queue.Queue[tuple[int, BaseException]] = queue.Queue()
        self.workers: list[threading.Thread] = []

    def submit(self, tag: int, rows: int = 1, priority: int = 0,
               timeout_ns: int | None = None) -> None:
        inputs = {"x": np.full((rows, 1), tag, dtype=np.float32)}
        self.batcher.submit(inputs, rows, lambda r: self.failures.put((tag, r)), priority,
                            timeout_ns)

    def free_worker(self) -> None:
        """A worker becomes free: it asks for its next batch and puts what it gets."""
        worker = threading.Thread(target=lambda: self.batches.put(self.batcher.next_batch()))
        worker.start()
        self.workers.append(worker)

    def next_batch(self, timeout: float = WAIT_S) -> Batch:
        batch = self.batches.get(timeout=timeout)
        assert batch is not None, "the batcher closed"
        return batch

    def free_one(self) -> Batch:
        """Free one worker and return the batch it takes."""
        self.free_worker()
        return self.next_batch()

    def tags(self, batch: Batch) -> list[int]:
        return [int(r.inputs["x"][0, 0]) for r in batch.requests]

    def close(self) -> None:
        """Fail what waits and end every worker still asking (they get None)."""
        self.batcher.close(drain=False)
        for worker in self.workers:
            worker.join(WAIT_S)
            assert not worker.is_alive()


@pytest.fixture
def make() -> Iterator[Any]:
    made: list[Harness] = []

    def factory(**knobs: Any) -> Harness:
        made.append(Harness(**knobs))
        return made[-1]

    yield factory
    for h in made:
        h.close()


def test_max_batch_size_is_honoured_in_rows(make: Any) -> None:
    h = make(max_batch_size=4, max_queue_delay_us=0)
    for tag, rows in enumerate([1, 2, 1, 3, 2, 1]):
        h.submit(tag, rows)
    batches = [h.free_one() for _ in range(3)]
    assert [b.rows for b in batches] == [4, 3, 3]
    assert [h.tags(b) for b in batches] == [[0, 1, 2], [3], [4, 5]]


def test_lone_request_waits_for_the_delay_and_no_longer(make: Any) -> None:
    delay_us = 20_000
    h = make(max_batch_size=8, max_queue_delay_us=delay_us)
    h.free_worker()
    h.submit(0)
    batch = h.next_batch()
    request = batch.requests[0]
    waited = batch.dispatch_ns - request.enqueue_ns
    assert batch.rows == 1
    assert waited >= delay_us * 1000
    assert waited <= delay_us * 1000 + 15 * MS  # scheduler tolerance


@pytest.mark.parametrize("sizes, expect", [((3,), 3), ((2, 4), 4)])
def test_preferred_size_dispatches_at_once(make: Any, sizes: tuple[int, ...], expect: int) -> None:
    h = make(max_batch_size=8, max_queue_delay_us=60_000_000, preferred_batch_sizes=sizes)
    for tag in range(5):
        h.submit(tag)
    began = time.perf_counter_ns()
    batch = h.free_one()
    assert batch.rows == expect
    assert h.tags(batch) == list(range(expect))
    assert batch.dispatch_ns - began < 1000 * MS  # far below the 60 s delay


def test_full_batch_dispatches_at_once_and_forming_batch_grows(make: Any) -> None:
    h = make(max_batch_size=3, max_queue_delay_us=60_000_000)
    h.free_worker()
    h.submit(0)
    h.submit(1)
    with pytest.raises(queue.Empty):
        h.next_batch(timeout=0.05)  # not full, delay far off: nothing yet
    h.submit(2)
    batch = h.next_batch()
    assert h.tags(batch) == [0, 1, 2]
    assert batch.first_pick_ns <= batch.requests[2].pick_ns <= batch.dispatch_ns


def test_next_request_that_does_not_fit_closes_the_batch(make: Any) -> None:
    h = make(max_batch_size=4, max_queue_delay_us=60_000_000)
    h.submit(0, rows=3)
    h.submit(1, rows=2)
    assert h.tags(h.free_one()) == [0]


def test_queue_bound_rejects_with_overloaded(make: Any) -> None:
    h = make(max_queue_size=3)
    for tag in range(3):
        h.submit(tag)
    with pytest.raises(Overloaded, match="max_queue_size=3"):
        h.submit(3)
    assert h.batcher.rejected == 1
    assert h.batcher.waiting == 3


def test_expired_requests_fail_with_timeout_and_never_run(make: Any) -> None:
    h = make(max_batch_size=4, max_queue_delay_us=0)
    began = time.perf_counter_ns()
    h.submit(0, timeout_ns=5 * MS)
    h.submit(1)
    tag, error = h.failures.get(timeout=WAIT_S)
    assert (tag, type(error)) == (0, RequestTimeout)
    assert time.perf_counter_ns() - began >= 5 * MS
    assert h.tags(h.free_one()) == [1]
    assert h.batcher.expired == 1


def test_request_in_a_forming_batch_can_expire(make: Any) -> None:
    h = make(max_batch_size=4, max_queue_delay_us=60_000_000)
    h.free_worker()
    h.submit(0, timeout_ns=5 * MS)
    h.submit(1)
    tag, error = h.failures.get(timeout=WAIT_S)
    assert (tag, type(error)) == (0, RequestTimeout)
    h.submit(2)
    h.submit(3)
    h.submit(4)
    assert h.tags(h.next_batch()) == [1, 2, 3, 4]


def test_priority_levels_then_fifo(make: Any) -> None:
    h = make(max_batch_size=1, max_queue_delay_us=0)
    for tag, priority in enumerate([2, 0, 1, 0, 2]):
        h.submit(tag, priority=priority)
    order = [h.tags(h.free_one())[0] for _ in range(5)]
    assert order == [1, 3, 2, 0, 4]


def test_live_reconfigure(make: Any) -> None:
    h = make(max_batch_size=8, max_queue_delay_us=0)
    for tag in range(6):
        h.submit(tag)
    h.batcher.configure(max_batch_size=2)
    assert h.free_one().rows == 2
    h.batcher.configure(max_batch_size=3, preferred_batch_sizes=[3, 3])
    assert h.free_one().rows == 3
    assert (h.batcher.config.max_batch_size, h.batcher.config.preferred_batch_sizes) == (3, (3,))


@pytest.mark.parametrize("knobs, key", [
    ({"max_batch_size": 0}, "max_batch_size"),
    ({"max_queue_delay_us": -1}, "max_queue_delay_us"),
    ({"preferred_batch_sizes": (16,)}, "preferred_batch_sizes"),
    ({"max_queue_size": "8"}, "max_queue_size"),
    ({"max_batch": 8}, "max_batch"),
])
def test_bad_knobs_name_the_key(make: Any, knobs: dict[str, Any], key: str) -> None:
    h = make(max_batch_size=8)
    with pytest.raises(ConfigError) as caught:
        h.batcher.configure(**knobs)
    assert caught.value.key == key
    assert h.batcher.config.max_batch_size == 8


def test_close_without_drain_fails_waiting_requests(make: Any) -> None:
    h = make()
    h.submit(0)
    h.batcher.close(drain=False)
    tag, error = h.failures.get(timeout=WAIT_S)
    assert tag == 0 and type(error) is SutError
    with pytest.raises(SutError):
        h.submit(1)


def test_close_with_drain_dispatches_waiting_requests_then_ends_workers(make: Any) -> None:
    h = make(max_batch_size=8, max_queue_delay_us=60_000_000)
    h.free_worker()
    h.submit(0)
    h.submit(1)
    h.batcher.close(drain=True)
    assert h.tags(h.next_batch()) == [0, 1]
    h.free_worker()
    assert h.batches.get(timeout=WAIT_S) is None


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 8), st.lists(st.integers(1, 8), min_size=1, max_size=20))
def test_batches_partition_requests_in_order(max_batch: int, sizes: list[int]) -> None:
    sizes = [min(s, max_batch) for s in sizes]
    h = Harness(max_batch_size=max_batch, max_queue_delay_us=0)
    try:
        for tag, rows in enumerate(sizes):
            h.submit(tag, rows)
        seen: list[int] = []
        while len(seen) < len(sizes):
            batch = h.free_one()
            assert 1 <= batch.rows <= max_batch
            assert batch.rows == sum(r.rows for r in batch.requests)
            seen += h.tags(batch)
        assert seen == list(range(len(sizes)))
    finally:
        h.close()


def test_free_workers_each_take_their_own_batch(make: Any) -> None:
    h = make(max_batch_size=2, max_queue_delay_us=60_000_000)
    h.free_worker()
    h.free_worker()
    for tag in range(4):
        h.submit(tag)
    got = sorted(h.tags(h.next_batch()) for _ in range(2))
    assert got == [[0, 1], [2, 3]]
    assert h.batcher.waiting == 0


def test_timeouts_fire_while_no_worker_is_free(make: Any) -> None:
    h = make(max_batch_size=4, max_queue_delay_us=0)
    for tag, timeout_ms in ((0, 30), (1, 5), (2, None)):
        h.submit(tag, timeout_ns=None if timeout_ms is None else timeout_ms * MS)
    first, second = (h.failures.get(timeout=WAIT_S) for _ in range(2))
    assert [first[0], second[0]] == [1, 0]  # the earlier deadline first
    assert h.tags(h.free_one()) == [2]
