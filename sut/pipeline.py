"""A pipelined instance: an issue thread and a completion thread around a ring of slots.

The issue thread takes a free slot, then its next batch (so batches grow while every
slot is busy), and launches the batch into the slot: staging, copies and compute are
queued on the device and the thread moves on; it never waits on the device. The
completion thread takes launched slots in launch order, waits until the device is done
with each (`Launcher.finish`), gives the slot back to the ring and hands the outputs on.
A batch that fails, at launch or at finish, fails alone: its slot goes back to the ring
and the batches behind it run. Closing the batch source drains: every launched batch
completes before the threads end.

The device work is behind `Launcher`: `sut.cudalaunch` queues it on CUDA streams,
`sut.hostlaunch` runs it on the CPU (the same ring, with CPU tensors standing in for
the streams).
"""

from __future__ import annotations

import logging
import queue
import threading
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
    """One instance's issue and completion threads over its launcher's ring."""

    def __init__(self, launcher: Launcher, next_batch: Callable[[], Any], deliver: Delivered,
                 fail: Failed, name: str, threads: int = 1) -> None:
        self._launcher = launcher
        self._next_batch = next_batch
        self._deliver = deliver
        self._fail = fail
        self._threads = threads
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for slot in range(launcher.slots):
            self._free.put(slot)
        # (slot, batch, launch error or None) in launch order; _DRAINED ends it
        self._launched: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._issuer = threading.Thread(target=self._issue, name=f"{name}-issue", daemon=True)
        self._completer = threading.Thread(target=self._complete, name=f"{name}-done",
                                           daemon=True)

    def start(self) -> None:
        """Start both threads."""
        self._completer.start()
        self._issuer.start()

    def join(self, timeout_s: float | None = None) -> None:
        """Wait for both threads to end (once the batch source returned None and all drained)."""
        self._issuer.join(timeout_s)
        self._completer.join(timeout_s)

    @property
    def alive(self) -> bool:
        """Whether either thread still runs."""
        return self._issuer.is_alive() or self._completer.is_alive()

    def _issue(self) -> None:
        self._launcher.bind_thread()
        torch.set_num_threads(self._threads)
        try:
            with torch.inference_mode():
                while True:
                    slot = self._free.get()
                    batch = self._next_batch()
                    if batch is None:
                        return
                    try:
                        self._launcher.launch(slot, batch)
                        self._launched.put((slot, batch, None))
                    except Exception as exc:  # noqa: BLE001 - fails this batch only
                        self._launched.put((slot, batch, exc))
        finally:
            self._launched.put(_DRAINED)

    def _complete(self) -> None:
        self._launcher.bind_thread()
        with torch.inference_mode():
            while (item := self._launched.get()) is not _DRAINED:
                slot, batch, error = item
                outputs: list[np.ndarray] = []
                phases: dict[str, int] = {}
                try:
                    if error is None:
                        outputs, phases = self._launcher.finish(slot)
                    else:
                        self._launcher.abandon(slot)
                except Exception as exc:  # noqa: BLE001 - fails this batch only
                    error = exc
                self._free.put(slot)
                try:
                    if error is None:
                        self._deliver(batch, outputs, phases)
                    else:
                        self._fail(batch, error)
                except Exception:  # noqa: BLE001 - last resort; the ring goes on
                    _log.exception("handing back a batch failed")
