"""Causal language models the engine serves, and the forward contract a user model meets.

Built-ins (seeded weights, nothing downloaded; byte vocabulary of `sut.llm.tokenizer`):

    tiny-llm    2 layers, width 128, 4 heads, 512 positions
    small-llm   4 layers, width 512, 8 heads, 2048 positions

A built-in's output layer masks every token but `EMITTABLE` (printable ASCII, tab, newline,
EOS), so each token it emits is one byte of text that decodes one-to-one: a client counting
bytes (`tokenizer = "bytes"`) counts exactly the server's `completion_tokens` (apart from a
closing EOS, which is counted and has no text).

A user model is `causal:pkg.module:factory`: `factory()` returns an `nn.Module` with

    vocab_size, max_positions, num_layers, num_kv_heads, head_dim   (int attributes)
    forward(tokens [T] int64, positions [T] int64, batch: PagedBatch) -> logits [T, vocab]

where `vocab_size >= 259` (bytes, BOS, EOS, PAD) and each attention layer i calls
`sut.llm.attention.paged_attention(i, q, k, v, batch)`. The engine allocates the KV blocks
from the attributes and calls the module under `torch.inference_mode()`. A user model keeps its
own vocabulary rules: the server decodes its byte tokens as UTF-8 as they come, bytes that do
not decode become U+FFFD (one character, three bytes), tokens >= 256 give no text, and usage
still counts tokens, not text.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from sut.errors import ConfigError, ModelLoadError
from sut.llm.attention import PagedBatch, paged_attention
from sut.llm.names import CAUSAL_PREFIX, LLM_MODELS
from sut.llm.tokenizer import EOS, VOCAB_SIZE

__all__ = ["EMITTABLE", "MODEL_SHAPES", "CausalShape", "KvShape", "TinyCausalLM", "kv_shape",
           "load_causal_model"]

_FAVOURED = b"etaoinshrdlu ETAOINSHRDLU.,"  # biased up, so random weights write letters
EMITTABLE = frozenset([*range(0x20, 0x7F), ord("\t"), ord("\n"), EOS])


@dataclass(frozen=True, slots=True)
class CausalShape:
    """The size of a built-in model."""

    layers: int
    width: int
    heads: int
    max_positions: int


MODEL_SHAPES = {
    "tiny-llm": CausalShape(layers=2, width=128, heads=4, max_positions=512),
    "small-llm": CausalShape(layers=4, width=512, heads=8, max_positions=2048),
}


@dataclass(frozen=True, slots=True)
class KvShape:
    """What the engine reads off a model to size its KV cache and bound its sequences."""

    vocab_size: int
    max_positions: int
    num_layers: int
    num_kv_heads: int
    head_dim: int


def kv_shape(model: nn.Module) -> KvShape:
    """The contract's int attributes of `model`."""
    return KvShape(*(int(getattr(model, name)) for name in _ATTRIBUTES))


_ATTRIBUTES = ("vocab_size", "max_positions", "num_layers", "num_kv_heads", "head_dim")


class _Block(nn.Module):
    """Pre-norm attention and MLP."""

    def __init__(self, index: int, width: int, heads: int) -> None:
        super().__init__()
        self.index, self.heads = index, heads
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.out = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor, batch: PagedBatch, mask: torch.Tensor) -> torch.Tensor:
        tokens, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(tokens, 3, self.heads, -1).unbind(1)
        attended = paged_attention(self.index, q, k, v, batch, mask)
        x = x + self.out(attended.reshape(tokens, width))
        out: torch.Tensor = x + self.down(F.gelu(self.up(self.norm2(x))))
        return out


class TinyCausalLM(nn.Module):
    """A decoder-only transformer with learned positions over the byte vocabulary."""

    silenced: torch.Tensor  # the tokens outside EMITTABLE, whose logits are -inf

    def __init__(self, shape: CausalShape) -> None:
        super().__init__()
        self.vocab_size = VOCAB_SIZE
        self.max_positions = shape.max_positions
        self.num_layers = shape.layers
        self.num_kv_heads = shape.heads
        self.head_dim = shape.width // shape.heads
        self.embed = nn.Embedding(VOCAB_SIZE, shape.width)
        self.position = nn.Embedding(shape.max_positions, shape.width)
        self.blocks = nn.ModuleList(_Block(i, shape.width, shape.heads)
                                    for i in range(shape.layers))
        self.norm = nn.LayerNorm(shape.width)
        self.head = nn.Linear(shape.width, VOCAB_SIZE)
        with torch.no_grad():
            for module in self.modules():
                if isinstance(module, nn.Linear | nn.Embedding):
                    module.weight.normal_(0.0, 1.0 / math.sqrt(shape.width))
            self.head.bias.zero_()
            self.head.bias[list(_FAVOURED)] = 2.0
        silenced = torch.ones(VOCAB_SIZE, dtype=torch.bool)
        silenced[sorted(EMITTABLE)] = False
        self.register_buffer("silenced", silenced, persistent=False)

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor,
                batch: PagedBatch) -> torch.Tensor:
        x = self.embed(tokens) + self.position(positions)
        mask = batch.key_mask()
        for block in self.blocks:
            x = block(x, batch, mask)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits.masked_fill(self.silenced, float("-inf"))


def _user_module(model: str) -> nn.Module:
    target = model[len(CAUSAL_PREFIX):]
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError("model", f"want causal:pkg.module:factory, got {model!r}")
    try:
        factory: Any = getattr(importlib.import_module(module_name), attr)
        built = factory()
    except Exception as exc:
        raise ModelLoadError(f"{model}: {type(exc).__name__}: {exc}") from exc
    if not isinstance(built, nn.Module):
        raise ModelLoadError(f"{model}: the factory returned {type(built).__name__},"
                             " not an nn.Module")
    for name in _ATTRIBUTES:
        if not isinstance(getattr(built, name, None), int):
            raise ModelLoadError(f"{model}: the module lacks the int attribute {name!r}")
    if kv_shape(built).vocab_size < VOCAB_SIZE:
        raise ModelLoadError(f"{model}: vocab_size {kv_shape(built).vocab_size} < {VOCAB_SIZE}"
                             " (bytes, BOS, EOS, PAD)")
    return built


def load_causal_model(model: str, seed: int = 0, device: str = "cpu",
                      dtype: torch.dtype = torch.float32) -> nn.Module:
    """The model `model` names, with weights drawn from `seed`, on `device`, in eval mode."""
    if model not in LLM_MODELS and not model.startswith(CAUSAL_PREFIX):
        raise ConfigError("model", f"unknown LLM {model!r}; built-ins: {', '.join(LLM_MODELS)};"
                                   " or causal:pkg.module:factory")
    devices = [torch.device(device)] if device != "cpu" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        built = (TinyCausalLM(MODEL_SHAPES[model]) if model in MODEL_SHAPES
                 else _user_module(model))
    return built.to(device=device, dtype=dtype).eval()
