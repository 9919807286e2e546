"""A pipelined instance: batches launched into a ring of slots, handed back in order.

A free slot takes the next batch (so batches grow while every slot is busy), and
launching queues the batch's staging, copies and compute on the device without waiting.
Launched slots are finished in launch order (`Launcher.finish` waits until the device is
done with one), go back to the ring, and their outputs are handed on. A batch that
fails, at launch or at finish, fails alone: its slot goes back to the ring and the
batches behind it run. Closing the batch source drains: every launched batch completes
before the threads end.

Two ways to run it. By default one thread does both: it launches while a slot is free
and a batch is due (`try_batch`), and waits on the device only when the ring is full or
nothing is due. With `completion_thread=True` an issue thread launches and never waits on
the device, and a completion thread waits and hands back. In CPython the two threads
pass the GIL back and forth at every torch call (each releases it), and on an H100 that
hand-off cost more than the overlap it bought (run1 of `scripts/gpu_checks.sh`), so one
thread is the default.

The device work is behind `Launcher`: `sut.cudalaunch` queues it on CUDA streams,
`sut.hostlaunch` runs it on the CPU (the same ring, with CPU tensors standing in for
the streams).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

__all__ = ["Launcher", "Pipeline"]

_log = logging.getLogger(__name__)


class Launcher(Protocol):
    """Device work of one instance, over `slots` reusable slots."""

    @property
    def slots(self) -> int:
        """How many batches may be in flight at once (the ring's length)."""
        ...

    def launch(self, slot: int, batch: Any) -> None:
        """Stage `batch` into `slot` and queue its work; must not wait on the device."""
        ...

    def finish(self, slot: int) -> tuple[list[np.ndarray], dict[str, int]]:
        """Wait for `slot`'s work; its outputs (the caller's own) and h2d/compute/d2h ns."""
        ...

    def ready(self, slot: int) -> bool:
        """Whether `slot`'s work is done (`finish` would not wait); never waits."""
        ...

    def abandon(self, slot: int) -> None:
        """After a failed launch: wait until the device no longer reads `slot`'s buffers."""
        ...

    def bind_thread(self) -> None:
        """Prepare the calling thread (current device) before it uses the launcher."""
        ...


Delivered = Callable[[Any, list[np.ndarray], dict[str, int]], None]
Failed = Callable[[Any, BaseException], None]
_DRAINED = object()


class Pipeline:
    """One instance's thread(s) over its launcher's ring (see the module docstring)."""

    def __init__(self, launcher: Launcher, next_batch: Callable[[], Any],
                 try_batch: Callable[[], Any], deliver: Delivered, fail: Failed, name: str,
                 threads: int = 1, completion_thread: bool = False) -> None:
        self._launcher = launcher
        self._next_batch = next_batch  # waits; None once closed and empty
        self._try_batch = try_batch  # the batch due now, or None; never waits
        self._deliver = deliver
        self._fail = fail
        self._threads = threads
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(launcher.slots):
            self._free.put(slot)
        # (slot, batch, launch error or None) in launch order; _DRAINED ends it
        self._launched: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads_run = (
            [threading.Thread(target=self._issue, name=f"{name}-issue", daemon=True),
             threading.Thread(target=self._complete, name=f"{name}-done", daemon=True)]
            if completion_thread else
            [threading.Thread(target=self._run, name=f"{name}-run", daemon=True)])

    def start(self) -> None:
        """Start the thread(s)."""
        for thread in reversed(self._threads_run):
            thread.start()

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for the thread(s) to end (once the batch source returned None and all drained)."""
        for thread in self._threads_run:
            thread.join(timeout_s)

    @property
    def alive(self) -> bool:
        """Whether a thread still runs."""
        return any(thread.is_alive() for thread in self._threads_run)

    def _prepare(self) -> None:
        self._launcher.bind_thread()
        torch.set_num_threads(self._threads)

    def _run(self) -> None:
        """One thread: launch while a slot is free and a batch is due, else hand back the
        oldest launched batch (waiting on the device only then)."""
        self._prepare()
        pending: deque[tuple[int, Any, BaseException | None]] = deque()
        free = deque(range(self._launcher.slots))
        with torch.inference_mode():
            try:
                while True:
                    while pending and (not free or pending[0][2] is not None
                                       or self._launcher.ready(pending[0][0])):
                        self._hand_back(*pending.popleft(), free.append)
                    batch = self._try_batch() if pending else self._next_batch()
                    if batch is None:
                        if not pending:
                            return  # closed, and everything handed back
                        self._hand_back(*pending.popleft(), free.append)
                        continue
                    slot = free.popleft()
                    pending.append((slot, batch, self._launch(slot, batch)))
            finally:
                while pending:
                    self._hand_back(*pending.popleft(), free.append)

    def _launch(self, slot: int, batch: Any) -> BaseException | None:
        try:
            self._launcher.launch(slot, batch)
        except Exception as exc:  # noqa: BLE001 - fails this batch only
            return exc
        return None

    def _issue(self) -> None:
        self._prepare()
        try:
            with torch.inference_mode():
                while True:
                    slot = self._free.get()
                    batch = self._next_batch()
                    if batch is None:
                        return
                    self._launched.put((slot, batch, self._launch(slot, batch)))
        finally:
            self._launched.put(_DRAINED)

    def _complete(self) -> None:
        self._launcher.bind_thread()
        with torch.inference_mode():
            while (item := self._launched.get()) is not _DRAINED:
                slot, batch, error = item
                self._hand_back(slot, batch, error, self._free.put)

    def _hand_back(self, slot: int, batch: Any, error: BaseException | None,
                   release: Callable[[int], None]) -> None:
        """Finish (or abandon) a launched slot, release it, then deliver or fail its batch."""
        outputs: list[np.ndarray] = []
        phases: dict[str, int] = {}
        try:
            if error is None:
                outputs, phases = self._launcher.finish(slot)
            else:
                self._launcher.abandon(slot)
        except Exception as exc:  # noqa: BLE001 - fails this batch only
            error = exc
        release(slot)
        try:
            if error is None:
                self._deliver(batch, outputs, phases)
            else:
                self._fail(batch, error)
        except Exception:  # noqa: BLE001 - last resort; the ring goes on
            _log.exception("handing back a batch failed")
