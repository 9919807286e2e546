"""The threaded gather: bit for bit the plain one, at odd row counts and splits."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from sut.gather import Gatherer, default_helpers


def _gather_threads(gatherer: Gatherer) -> set[threading.Thread]:
    """The threads this gatherer started (others' may live beside them)."""
    pool = gatherer._pool
    return set(pool._threads) if pool is not None else set()


@pytest.mark.parametrize("dtype", [np.float32, np.uint16, np.int64])
@pytest.mark.parametrize("helpers", [1, 2, 4])
def test_the_threaded_gather_equals_the_plain_one_bit_for_bit(dtype: type, helpers: int) -> None:
    rng = np.random.default_rng(helpers)
    data = rng.integers(0, 60_000, size=(97, 3, 5, 7)).astype(dtype)
    gatherer = Gatherer(helpers, threshold_bytes=0)  # every gather split
    try:
        for rows in (1, 2, 3, 5, 7, 64, 255, 257):
            picked = rng.integers(-3, 100, size=rows)  # some out of range: clipped
            want = np.take(data, picked, axis=0, mode="clip")
            out = np.full((rows, 3, 5, 7), 7, dtype=dtype)
            gatherer.take(data, picked, out)
            assert out.tobytes() == want.tobytes(), rows
    finally:
        gatherer.close()


def test_a_gather_below_the_threshold_runs_in_the_callers_thread() -> None:
    data = np.arange(64 * 16, dtype=np.float32).reshape(64, 16)
    gatherer = Gatherer(2, threshold_bytes=16 * 4 * 8)  # 8 rows at most in one call
    try:
        small = np.empty((8, 16), np.float32)
        gatherer.take(data, np.arange(8)[::-1], small)
        assert not _gather_threads(gatherer)  # no thread started for it
        assert small.tolist() == data[7::-1].tolist()
        large = np.empty((9, 16), np.float32)
        gatherer.take(data, np.arange(9), large)
        helpers = _gather_threads(gatherer)
        assert helpers  # split: a helper ran
        assert large.tolist() == data[:9].tolist()
    finally:
        gatherer.close()
    assert not any(t.is_alive() for t in helpers)  # close stopped them
    after = np.empty((9, 16), np.float32)
    gatherer.take(data, np.arange(9), after)  # closed: still gathers, in one thread
    assert after.tolist() == data[:9].tolist() and gatherer._pool is None


def test_helpers_default_from_the_cores_and_are_bounded() -> None:
    assert 0 <= default_helpers() <= 4
    assert Gatherer(0)._pool is None  # no helpers: no pool at all
