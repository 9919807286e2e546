"""Gather a batch's rows into a lent block: one `np.take`, or split over a few threads.

`np.take(data, picked, axis=0, out=block, mode='clip')` releases the GIL for plain
dtypes, so a large gather (cnn at batch 256: 3 MB) split into contiguous row ranges, one
per thread, runs several memory streams at once; below `threshold_bytes` one call in the
caller's thread costs less than handing work to another thread. The caller always takes
the first range itself. The threads are made once and stopped with `close`.
"""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from sut.workers import cpu_cores

__all__ = ["DEFAULT_THRESHOLD_BYTES", "Gatherer", "default_helpers"]

#: bytes in a batch above which the gather is split over threads. On the H100 host
#: (`benchmarks/gather.py`, two runs) the hand-off to 4 threads cost ~150 us: split, 1.5 MiB
#: took 177-256 us against 111-123 us in one call, and 3 MiB 210-275 us against 235-295 us
#: (7-11% less); so only batches past 2 MiB are split (cnn fp32 rows from batch ~170)
DEFAULT_THRESHOLD_BYTES = 2 * 1024 * 1024


def default_helpers() -> int:
    """Threads beside the caller's: min(4, cores - 1), from the cores this process may use."""
    return max(0, min(4, cpu_cores() - 1))


def _take(data: np.ndarray, picked: np.ndarray, out: np.ndarray) -> None:
    np.take(data, picked, axis=0, out=out, mode="clip")


class Gatherer:
    """Gathers rows (`take`) in the caller's thread plus up to `helpers` threads."""

    def __init__(self, helpers: int | None = None,
                 threshold_bytes: int = DEFAULT_THRESHOLD_BYTES) -> None:
        self.helpers = default_helpers() if helpers is None else max(0, helpers)
        self.threshold_bytes = threshold_bytes
        self._pool = (ThreadPoolExecutor(self.helpers, thread_name_prefix="sut-gather")
                      if self.helpers else None)

    def take(self, data: np.ndarray, picked: np.ndarray, out: np.ndarray) -> None:
        """`out[i] = data[picked[i]]` for every i (indices clipped into range); `out` is a
        C-contiguous array of `len(picked)` rows of `data`'s row shape and dtype."""
        rows = len(picked)
        parts = min(self.helpers + 1, rows)
        if self._pool is None or parts < 2 or out.nbytes <= self.threshold_bytes:
            _take(data, picked, out)
            return
        bounds = [rows * i // parts for i in range(parts + 1)]
        pending: list[Future[None]] = [
            self._pool.submit(_take, data, picked[a:b], out[a:b])
            for a, b in zip(bounds[1:-1], bounds[2:], strict=True)]
        try:
            _take(data, picked[:bounds[1]], out[:bounds[1]])
        finally:
            for future in pending:
                future.result()

    def close(self) -> None:
        """Stop the threads (after any gather under way); `take` then runs in one thread."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)
