"""What a loaded model is: a module, its tensor specs and a deterministic dataset."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch

from oipwire.datatypes import TensorSpec, numpy_dtype
from sut.errors import InvalidInput

__all__ = ["Dataset", "LoadedModel", "SyntheticDataset", "build_seeded", "check_indices", "seeded"]


class Dataset(Protocol):
    """Samples addressed by index in [0, size); the same index gives the same sample."""

    size: int

    def sample_inputs(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """One row per index, keyed by input name, in the input specs' dtypes."""
        ...

    def labels(self, indices: np.ndarray) -> np.ndarray | None:
        """The true class of each index, or None when the dataset has no labels."""
        ...


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model ready to place on devices; `module` is on the CPU in fp32, in eval mode.

    `info` holds facts worth reporting (for instance the held-out accuracy).
    """

    name: str
    platform: str
    module: torch.nn.Module
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    dataset: Dataset
    info: dict[str, Any] = field(default_factory=dict)


def check_indices(indices: np.ndarray, size: int) -> np.ndarray:
    """`indices` as int64, or InvalidInput when one lies outside [0, size)."""
    idx = np.asarray(indices, dtype=np.int64).reshape(-1)
    if idx.size and (idx.min() < 0 or idx.max() >= size):
        raise InvalidInput(f"sample index out of range [0, {size})")
    return idx


class SyntheticDataset:
    """Seeded random inputs, generated once: floats ~ N(0, 1), integers in [0, int_high)."""

    def __init__(
        self, specs: tuple[TensorSpec, ...], size: int, seed: int, int_high: int = 2
    ) -> None:
        rng = np.random.default_rng(seed)
        self.size = size
        self._data: dict[str, np.ndarray] = {}
        for spec in specs:
            shape = (size, *spec.shape[1:])
            dtype = numpy_dtype(spec.datatype)
            if np.issubdtype(dtype, np.floating):
                self._data[spec.name] = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
            else:
                self._data[spec.name] = rng.integers(0, int_high, shape).astype(dtype)

    def sample_inputs(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Rows of the generated tensors."""
        idx = check_indices(indices, self.size)
        return {name: data[idx] for name, data in self._data.items()}

    def labels(self, indices: np.ndarray) -> np.ndarray | None:
        """Synthetic data has no labels."""
        check_indices(indices, self.size)
        return None


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run a block with torch's CPU generator seeded, restoring it afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def build_seeded(factory: Callable[[], torch.nn.Module], seed: int) -> torch.nn.Module:
    """A module built under `seeded(seed)`, in eval mode."""
    with seeded(seed):
        return factory().eval()
