"""Query sample library: which samples are loaded, and which each query uses.

MLPerf keeps three seeds apart: one picks the performance sample set out of
the library, one picks each query's samples from that set, one drives the
schedule (see `schedule.py`). Here the first two live.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["QuerySampleLibrary", "accuracy_queries", "permuted_chunks", "sample_chunks"]


@dataclass(frozen=True, slots=True)
class QuerySampleLibrary:
    """Samples by index: `total` in the library, `performance_count` of them loaded."""

    total: int
    performance_count: int
    seed: int

    def loaded_indices(self) -> np.ndarray:
        """The performance sample set, chosen without replacement, in ascending order."""
        rng = np.random.default_rng(self.seed)
        picked = rng.choice(self.total, size=self.performance_count, replace=False)
        return np.sort(picked).astype(np.int64)


def sample_chunks(
    qsl: QuerySampleLibrary, samples_per_query: int, seed: int | Sequence[int], chunk: int
) -> Iterator[np.ndarray]:
    """Endless chunks of shape (chunk, samples_per_query): library indices per query."""
    loaded = qsl.loaded_indices()
    rng = np.random.default_rng(seed)
    while True:
        picks = rng.integers(0, len(loaded), size=(chunk, samples_per_query))
        yield loaded[picks]


def permuted_chunks(
    qsl: QuerySampleLibrary, samples_per_query: int, seed: int | Sequence[int], chunk: int
) -> Iterator[np.ndarray]:
    """Like `sample_chunks`, drawn from successive permutations of the performance set:
    every loaded sample is issued once before any is issued again (MLPerf's equal issue)."""
    loaded = qsl.loaded_indices()
    rng = np.random.default_rng(seed)
    need = chunk * samples_per_query
    pending = np.empty(0, dtype=np.int64)
    while True:
        while pending.size < need:
            pending = np.concatenate([pending, rng.permutation(loaded)])
        yield pending[:need].reshape(chunk, samples_per_query)
        pending = pending[need:]


def accuracy_queries(qsl: QuerySampleLibrary, samples_per_query: int) -> list[np.ndarray]:
    """Every library sample exactly once, in order, grouped into queries (last may be short)."""
    order = np.arange(qsl.total, dtype=np.int64)
    return [order[i : i + samples_per_query] for i in range(0, qsl.total, samples_per_query)]
