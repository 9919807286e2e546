"""`digits`: an MLP for scikit-learn's 8x8 digits, trained once and cached.

The 1,797 images ship with scikit-learn (no download). A seeded permutation
splits them 70/30; the model trains on the first part in well under a second,
and the held-out 30 % is the dataset the service serves (real images, labels).
Weights are cached as tensors under `cache_dir()` and read back with
`torch.load(..., weights_only=True)`; an unreadable cache file is retrained.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import torch
from torch import nn

from oipwire.datatypes import TensorSpec
from sut.models.base import LoadedModel, build_seeded, check_indices

__all__ = ["DigitsDataset", "cache_dir", "digits_net", "load_digits_model", "train_digits"]

_FORMAT = 2
_EPOCHS = 200
_HIDDEN = 256
_TRAIN_FRACTION = 0.7
_INPUTS = (TensorSpec("input", "FP32", (-1, 64)),)
_OUTPUTS = (TensorSpec("output", "FP32", (-1, 10)),)


def cache_dir() -> Path:
    """`$LOADGEN_CACHE_DIR`, else `$XDG_CACHE_HOME/loadgen`, else `~/.cache/loadgen`."""
    if override := os.environ.get("LOADGEN_CACHE_DIR"):
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "loadgen"


def digits_net() -> nn.Module:
    """64 -> 256 -> 10 with ReLU."""
    return nn.Sequential(nn.Linear(64, _HIDDEN), nn.ReLU(), nn.Linear(_HIDDEN, 10))


def _split(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(images scaled to [0, 1] as float32, labels, train indices, held-out indices)."""
    # imported here: scikit-learn (and the SciPy it loads) takes seconds to import, and every
    # `loadgen serve` and builtin: SUT imports this module, most to serve another model
    from sklearn.datasets import load_digits  # type: ignore[import-untyped]

    data = load_digits()
    images = (data.data / 16.0).astype(np.float32)
    labels = data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    cut = int(_TRAIN_FRACTION * len(labels))
    return images, labels, np.sort(order[:cut]), np.sort(order[cut:])


class DigitsDataset:
    """The held-out digits: real images and their labels."""

    def __init__(self, seed: int) -> None:
        images, labels, _, held_out = _split(seed)
        self._images = images[held_out]
        self._labels = labels[held_out]
        self.size = len(held_out)

    def sample_inputs(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """Flattened 8x8 images in [0, 1]."""
        return {"input": self._images[check_indices(indices, self.size)]}

    def labels(self, indices: np.ndarray) -> np.ndarray | None:
        """The digit shown in each image."""
        labels: np.ndarray = self._labels[check_indices(indices, self.size)]
        return labels


def train_digits(seed: int) -> tuple[nn.Module, float]:
    """Train on the training split (full-batch AdamW); return the model and held-out accuracy."""
    images, labels, train, held_out = _split(seed)
    x, y = torch.from_numpy(images), torch.from_numpy(labels)
    model = build_seeded(digits_net, seed).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=1e-2)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # fastest for so small a model, and the same sums on any machine
    try:
        for _ in range(_EPOCHS):  # full batch, no dropout: deterministic given the seeded init
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x[train]), y[train])
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    with torch.no_grad():
        accuracy = float((model(x[held_out]).argmax(dim=1) == y[held_out]).float().mean())
    return model, accuracy


def _cache_file(seed: int) -> Path:
    return cache_dir() / f"digits-v{_FORMAT}-seed{seed}.pt"


def _read_cache(path: Path) -> tuple[dict[str, torch.Tensor], float] | None:
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        return dict(blob["state"]), float(blob["accuracy"])
    except (OSError, RuntimeError, KeyError, TypeError, ValueError, EOFError,
            pickle.UnpicklingError):
        return None


def load_digits_model(seed: int) -> LoadedModel:
    """The digits model from the cache, training and caching it first when needed."""
    path = _cache_file(seed)
    cached = _read_cache(path) if path.exists() else None
    if cached is None:
        model, accuracy = train_digits(seed)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        torch.save({"state": model.state_dict(), "accuracy": accuracy}, tmp)
        os.replace(tmp, path)
    else:
        state, accuracy = cached
        model = digits_net()
        model.load_state_dict(state)
        model.eval()
    info = {"held_out_accuracy": accuracy, "weights": str(path)}
    return LoadedModel("digits", "pytorch", model, _INPUTS, _OUTPUTS, DigitsDataset(seed), info)
