"""Shared fixtures: a session-wide model cache, and a helper to run coroutines."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

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
