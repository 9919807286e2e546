"""User causal models for `causal:tests.sut.llm.causal_models:FACTORY`."""

from __future__ import annotations

import torch
from torch import nn

from sut.llm.model import CausalShape, TinyCausalLM


def three_layers() -> nn.Module:
    """A valid model of the contract: the built-in class at another size."""
    return TinyCausalLM(CausalShape(layers=3, width=64, heads=2, max_positions=256))


def not_a_module() -> object:
    return "a string"


def no_attributes() -> nn.Module:
    return nn.Linear(2, 2)


class _Broken(TinyCausalLM):
    def forward(self, *args: object) -> torch.Tensor:
        raise RuntimeError("kernel missing")


def broken_forward() -> nn.Module:
    """Loads, but every forward raises."""
    return _Broken(CausalShape(layers=1, width=32, heads=2, max_positions=64))


class _FailsAfterWarmUp(TinyCausalLM):
    """Answers the two forwards of the engine's warm-up, then raises (a lost device)."""

    def forward(self, *args: object) -> torch.Tensor:
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls > 2:
            raise RuntimeError("device lost")
        return super().forward(*args)


def fails_after_warmup() -> nn.Module:
    """Loads and warms up, then every forward raises."""
    return _FailsAfterWarmUp(CausalShape(layers=1, width=32, heads=2, max_positions=64))
