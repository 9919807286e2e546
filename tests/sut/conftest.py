"""Shared fixtures: a session-wide model cache, CUDA stand-ins on the CPU, and a helper to
run coroutines."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch

T = TypeVar("T")


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point LOADGEN_CACHE_DIR at a fresh folder, so digits trains once per session."""
    path = tmp_path_factory.mktemp("cache")
    before = os.environ.get("LOADGEN_CACHE_DIR")
    os.environ["LOADGEN_CACHE_DIR"] = str(path)
    yield path
    if before is None:
        del os.environ["LOADGEN_CACHE_DIR"]
    else:
        os.environ["LOADGEN_CACHE_DIR"] = before


def run(coro: Coroutine[Any, Any, T], timeout_s: float = 30.0) -> T:
    """Run a coroutine to completion, failing it after `timeout_s`."""
    return asyncio.run(asyncio.wait_for(coro, timeout_s))


class _Event:
    """A CUDA event on the CPU: recorded at once, 1 us apart."""

    def __init__(self, enable_timing: bool = False) -> None:
        self.recorded = False

    def record(self, stream: Any = None) -> None:
        self.recorded = True

    def query(self) -> bool:
        return self.recorded

    def synchronize(self) -> None:
        assert self.recorded

    def elapsed_time(self, other: _Event) -> float:
        return 0.001


class _Stream:
    """A CUDA stream on the CPU: the work queued on it has already run."""

    def __init__(self, device: Any = None) -> None:
        self.cuda_stream = id(self)

    def wait_event(self, event: _Event) -> None:
        assert event.recorded

    def synchronize(self) -> None:
        return None


class _DeviceContext(contextlib.nullcontext[None]):
    """`torch.cuda.device(...)` on the CPU: selects nothing (a class, as torch checks
    `isinstance(x, torch.cuda.device)`)."""

    def __init__(self, device: Any = None) -> None:
        super().__init__()


@pytest.fixture
def cuda_on_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.cuda's streams, events and device context, and pinned memory, on the CPU."""
    empty = torch.empty

    def unpinned(*args: Any, pin_memory: bool = False, **kwargs: Any) -> torch.Tensor:
        return empty(*args, **kwargs)

    monkeypatch.setattr(torch.cuda, "Stream", _Stream)
    monkeypatch.setattr(torch.cuda, "Event", _Event)
    monkeypatch.setattr(torch.cuda, "set_stream", lambda stream: None)
    monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: _Stream())
    monkeypatch.setattr(torch.cuda, "device", _DeviceContext)
    monkeypatch.setattr(torch, "empty", unpinned)  # what staging, cudalaunch and workers call
