"""Small CPU-friendly built-in models with seeded weights and seeded synthetic data.

    mlp          input  FP32 [-1, 256]  -> output FP32 [-1, 10]   two hidden layers of 512
    cnn          input  FP32 [-1, 3, 32, 32] -> output FP32 [-1, 10]   two conv blocks
    transformer  input_ids INT64 [-1, 32] -> output FP32 [-1, 10]   2-layer encoder, d=64
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from oipwire.datatypes import TensorSpec
from sut.models.base import LoadedModel, SyntheticDataset, build_seeded

__all__ = ["SYNTHETIC", "SmallCnn", "SmallTransformer", "load_synthetic", "mlp"]

_CLASSES = 10
_VOCAB = 1000
_SEQ = 32


def mlp() -> nn.Module:
    """256 -> 512 -> 512 -> 10 with ReLU."""
    return nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, _CLASSES)
    )


class SmallCnn(nn.Module):
    """Two 3x3 conv blocks on 32x32 RGB, global average pool, linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.head = nn.Linear(32, _CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.head(self.features(x).mean(dim=(2, 3)))
        return logits


class SmallTransformer(nn.Module):
    """Token and position embeddings, a 2-layer encoder, mean pooling, linear head."""

    def __init__(self, d_model: int = 64, heads: int = 4, layers: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(_VOCAB, d_model)
        self.position = nn.Parameter(torch.randn(1, _SEQ, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=2 * d_model, dropout=0.0, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, _CLASSES)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(self.embed(input_ids) + self.position)
        logits: torch.Tensor = self.head(hidden.mean(dim=1))
        return logits


_OUT = (TensorSpec("output", "FP32", (-1, _CLASSES)),)

#: name -> (factory, input specs, dataset size, integer range of synthetic inputs)
SYNTHETIC: dict[str, tuple[Callable[[], nn.Module], tuple[TensorSpec, ...], int, int]] = {
    "mlp": (mlp, (TensorSpec("input", "FP32", (-1, 256)),), 1024, 2),
    "cnn": (SmallCnn, (TensorSpec("input", "FP32", (-1, 3, 32, 32)),), 512, 2),
    "transformer": (
        SmallTransformer, (TensorSpec("input_ids", "INT64", (-1, _SEQ)),), 1024, _VOCAB
    ),
}


def load_synthetic(name: str, seed: int) -> LoadedModel:
    """Build a synthetic built-in with weights and data drawn from `seed`."""
    factory, inputs, size, int_high = SYNTHETIC[name]
    module = build_seeded(factory, seed)
    dataset = SyntheticDataset(inputs, size, seed, int_high)
    return LoadedModel(name, "pytorch", module, inputs, _OUT, dataset)
