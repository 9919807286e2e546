"""The pipelined executor's logic on the CPU: ring reuse, ordering, hand-off, errors, drain,
in both of its modes (one thread; an issue and a completion thread).

`HostLauncher` stands in for the CUDA streams with CPU tensors; `Scripted` is a launcher
whose `finish` waits on a gate per batch, so a test can hold batches in flight.
"""

from __future__ import annotations

import copy
import queue
import threading
from typing import Any

import numpy as np
import pytest
import torch

from oipwire.datatypes import TensorSpec
from sut.batcher import Batch, Request
from sut.forward import Forward
from sut.hostlaunch import HostLauncher
from sut.models import load_model
from sut.pipeline import Pipeline

WAIT_S = 20.0


def _batch(x: np.ndarray, tag: int = 0) -> Batch:
    request = Request({"input": x}, len(x), lambda _: None, 0, 0, None, tag)
    request.pick_ns = 0
    return Batch([request], len(x), tag)


class Sink:
    """What the pipeline hands back, in order, with the thread that handed it."""

    def __init__(self) -> None:
        self.items: queue.Queue[tuple[str, Any, Any, str]] = queue.Queue()

    def deliver(self, batch: Batch, outputs: list[np.ndarray], phases: dict[str, int]) -> None:
        self.items.put(("ok", batch, (outputs, phases), threading.current_thread().name))

    def fail(self, batch: Batch, error: BaseException) -> None:
        self.items.put(("failed", batch, error, threading.current_thread().name))

    def take(self, count: int) -> list[tuple[str, Any, Any, str]]:
        return [self.items.get(timeout=WAIT_S) for _ in range(count)]


class Source:
    """Batches, then closed: `next_batch` as the batcher's (None once closed and empty),
    `try_batch` as its non-waiting twin."""

    def __init__(self, batches: list[Batch]) -> None:
        self._batches: queue.Queue[Batch] = queue.Queue()
        for batch in batches:
            self._batches.put(batch)

    def next_batch(self) -> Batch | None:
        return self.try_batch()

    def try_batch(self) -> Batch | None:
        try:
            return self._batches.get_nowait()
        except queue.Empty:
            return None


MODES = [pytest.param(False, id="one-thread"), pytest.param(True, id="completion-thread")]


def _pipeline(launcher: Any, batches: list[Batch], sink: Sink, name: str,
              completion_thread: bool) -> Pipeline:
    source = Source(batches)
    return Pipeline(launcher, source.next_batch, source.try_batch, sink.deliver, sink.fail,
                    name, completion_thread=completion_thread)


def _mlp() -> tuple[Forward, Any]:
    loaded = load_model("mlp", {}, 0)
    return Forward(copy.deepcopy(loaded.module), "fp32", loaded.outputs), loaded


@pytest.mark.parametrize("completion_thread", MODES)
def test_batches_come_back_in_order_correct_and_the_ring_is_reused(
        completion_thread: bool) -> None:
    forward, loaded = _mlp()
    launcher = HostLauncher(forward, loaded.inputs, slots=3)
    x = loaded.dataset.sample_inputs(np.arange(64))["input"]
    sizes = [32, 32, 32, *(1 + i * 3 for i in range(9))]  # the first pass sizes every slot
    batches = [_batch(x[i:i + rows], i) for i, rows in enumerate(sizes)]
    sink = Sink()
    pipeline = _pipeline(launcher, batches, sink, "test", completion_thread)
    pipeline.start()
    got = sink.take(12)
    pipeline.join(WAIT_S)
    assert not pipeline.alive
    assert [item[1].dispatch_ns for item in got] == list(range(12))  # launch order
    with torch.inference_mode():
        for kind, batch, (outputs, phases), thread in got:
            want = loaded.module(torch.from_numpy(batch.requests[0].inputs["input"])).numpy()
            assert kind == "ok" and thread == ("test-done" if completion_thread else "test-run")
            np.testing.assert_allclose(outputs[0], want, rtol=1e-5, atol=1e-6)
            assert set(phases) == {"h2d", "compute", "d2h"}
    buffers = [launcher.input_buffers(slot)[0] for slot in range(3)]
    # each slot's buffer is the one its first batch made (a new one would be smaller)
    assert all(b is not None and b.shape[0] == 32 for b in buffers)
    assert len({b.data_ptr() for b in buffers if b is not None}) == 3


@pytest.mark.parametrize("completion_thread", MODES)
def test_outputs_stay_the_callers_when_the_slot_is_reused(completion_thread: bool) -> None:
    spec = (TensorSpec("input", "FP32", (-1, 2)),)
    launcher = HostLauncher(Forward(torch.nn.Identity(), "fp32", spec), spec, slots=1)
    batches = [_batch(np.full((2, 2), i, np.float32), i) for i in range(4)]
    sink = Sink()
    pipeline = _pipeline(launcher, batches, sink, "alias", completion_thread)
    pipeline.start()
    got = sink.take(4)
    pipeline.join(WAIT_S)
    assert [float(item[2][0][0].max()) for item in got] == [0.0, 1.0, 2.0, 3.0]


class Scripted:
    """A launcher whose batches finish only when their gate opens; some fail."""

    def __init__(self, slots: int, fail_launch: set[int], fail_finish: set[int]) -> None:
        self.slots = slots
        self.gates = {i: threading.Event() for i in range(64)}
        self.launched: queue.Queue[int] = queue.Queue()
        self.in_slot: dict[int, int] = {}
        self.abandoned: list[int] = []
        self._fail_launch, self._fail_finish = fail_launch, fail_finish

    def bind_thread(self) -> None:
        pass

    def launch(self, slot: int, batch: Batch) -> None:
        tag = batch.dispatch_ns
        assert slot not in self.in_slot.values(), "a slot in flight was launched again"
        self.launched.put(tag)
        if tag in self._fail_launch:
            raise RuntimeError(f"launch of {tag} failed")
        self.in_slot[tag] = slot

    def ready(self, slot: int) -> bool:
        tag = next(t for t, s in self.in_slot.items() if s == slot)
        return self.gates[tag].is_set()

    def finish(self, slot: int) -> tuple[list[np.ndarray], dict[str, int]]:
        tag = next(t for t, s in self.in_slot.items() if s == slot)
        assert self.gates[tag].wait(WAIT_S)
        del self.in_slot[tag]
        if tag in self._fail_finish:
            raise RuntimeError(f"finish of {tag} failed")
        return [np.array([tag])], {"compute": 1}

    def abandon(self, slot: int) -> None:
        self.abandoned.append(slot)


@pytest.mark.parametrize("completion_thread", MODES)
def test_the_ring_fills_before_anything_waits_for_the_device(completion_thread: bool) -> None:
    launcher = Scripted(3, set(), set())
    batches = [_batch(np.zeros((1, 1), np.float32), i) for i in range(5)]
    sink = Sink()
    pipeline = _pipeline(launcher, batches, sink, "ring", completion_thread)
    pipeline.start()
    # nothing has finished, yet three batches are launched: one per slot, no more
    assert [launcher.launched.get(timeout=WAIT_S) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(queue.Empty):
        launcher.launched.get(timeout=0.2)  # a bounded check that the fourth waits
    for gate in reversed(range(5)):  # opened last-first: delivery stays in launch order
        launcher.gates[gate].set()
    got = sink.take(5)
    pipeline.join(WAIT_S)
    assert [item[2][0][0][0] for item in got] == [0, 1, 2, 3, 4]
    assert {item[3] for item in got} == {"ring-done" if completion_thread else "ring-run"}


@pytest.mark.parametrize("completion_thread", MODES)
def test_a_failing_batch_fails_alone_and_the_others_run(completion_thread: bool) -> None:
    launcher = Scripted(2, fail_launch={1}, fail_finish={3})
    for gate in launcher.gates.values():
        gate.set()
    batches = [_batch(np.zeros((1, 1), np.float32), i) for i in range(6)]
    sink = Sink()
    pipeline = _pipeline(launcher, batches, sink, "errors", completion_thread)
    pipeline.start()
    got = sink.take(6)
    pipeline.join(WAIT_S)
    kinds = [(item[1].dispatch_ns, item[0]) for item in got]
    assert kinds == [(0, "ok"), (1, "failed"), (2, "ok"), (3, "failed"), (4, "ok"), (5, "ok")]
    assert "launch of 1" in str(got[1][2]) and "finish of 3" in str(got[3][2])
    assert len(launcher.abandoned) == 1 and not pipeline.alive


@pytest.mark.parametrize("completion_thread", MODES)
def test_closing_drains_every_launched_batch_before_the_threads_end(
        completion_thread: bool) -> None:
    launcher = Scripted(3, set(), set())
    batches = [_batch(np.zeros((1, 1), np.float32), i) for i in range(3)]  # then closed
    sink = Sink()
    pipeline = _pipeline(launcher, batches, sink, "drain", completion_thread)
    pipeline.start()
    assert [launcher.launched.get(timeout=WAIT_S) for _ in range(3)] == [0, 1, 2]
    assert pipeline.alive  # closed, but three batches still in flight
    for gate in range(3):
        launcher.gates[gate].set()
    pipeline.join(WAIT_S)
    assert not pipeline.alive
    assert [item[0] for item in sink.take(3)] == ["ok"] * 3
    assert sink.items.empty()
