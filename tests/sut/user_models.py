"""Model factories that tests load through `import:tests.sut.user_models:NAME`."""

from __future__ import annotations

import threading

import torch
from torch import nn

from oipwire.datatypes import TensorSpec

#: set to let `gated` models compute; tests clear it to hold a worker busy
GATE = threading.Event()
GATE.set()
#: set by a `gated` model once a batch has reached it
ENTERED = threading.Event()


class Echo(nn.Module):
    """Returns its input, doubled (a fresh tensor): each output row names its request."""

    input_specs = (TensorSpec("x", "FP32", (-1, 4)),)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Gated(nn.Module):
    """Waits for GATE, then sums rows; lets a test hold a worker busy without sleeping."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ENTERED.set()
        if not GATE.wait(timeout=20):
            raise RuntimeError("gate never opened")
        return x.sum(dim=1, keepdim=True)


class FirstTwo(nn.Module):
    """Returns a view of its input's first two columns: an output that aliases the input."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :2]


class Picky(nn.Module):
    """Raises on any input above 1000: a batch whose inference fails."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if bool((x > 1000).any()):
            raise ValueError("input above 1000")
        return x


class TwoHeads(nn.Module):
    """Two named outputs in a dict."""

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"total": x.sum(dim=1), "biggest": x.max(dim=1).values}


def echo() -> nn.Module:
    return Echo()


def gated() -> nn.Module:
    return Gated()


def first_two() -> nn.Module:
    return FirstTwo()


def picky() -> nn.Module:
    return Picky()


def two_heads() -> nn.Module:
    return TwoHeads()


def not_a_module() -> object:
    return object()


def bytes_input() -> nn.Module:
    """Declares a BYTES input: valid on the wire, but torch has no dtype for it."""
    module = Echo()
    module.input_specs = (("x", "BYTES", (-1, 4)),)  # type: ignore[assignment]
    return module


def bad_shape() -> nn.Module:
    """Declares an input shape no spec may have."""
    module = Echo()
    module.input_specs = (("x", "FP32", (-1, -4)),)  # type: ignore[assignment]
    return module


class Syncs(nn.Module):
    """Reads a value back to the host in its forward: runs eagerly, but no CUDA graph holds it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if float(x.abs().sum()) < 0:  # never true; the read is the point
            raise AssertionError("negative absolute sum")
        return x * 2


def syncs() -> nn.Module:
    return Syncs()
