"""A model's forward pass as the harness runs it, on any device.

Floating inputs are cast to the model's precision, the result is put in output-spec
order, and each output is cast to its spec's dtype (so a bf16 model still answers FP32).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from oipwire.datatypes import TensorSpec
from sut.models import as_outputs
from sut.tensors import torch_dtype

__all__ = ["PRECISIONS", "Forward"]

PRECISIONS: dict[str, torch.dtype] = {
    "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
}


class Forward:
    """`model` at `precision`, called on input tensors in spec order."""

    def __init__(self, model: torch.nn.Module, precision: str,
                 outputs: tuple[TensorSpec, ...]) -> None:
        self.model = model
        self.precision = precision
        self._dtype = PRECISIONS[precision]
        self._names = tuple(s.name for s in outputs)
        self._out_dtypes = tuple(torch_dtype(s.datatype) for s in outputs)

    def __call__(self, tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Outputs in spec order and spec dtypes."""
        cast = [t.to(self._dtype) if t.dtype != self._dtype and t.is_floating_point() else t
                for t in tensors]
        results = as_outputs(self.model(*cast), self._names)
        return [r if r.dtype == dt else r.to(dt)
                for r, dt in zip(results, self._out_dtypes, strict=True)]
