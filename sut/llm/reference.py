"""A bare greedy decode, the yardstick the engine's outputs are checked against.

No engine, no scheduler, no paging: each step recomputes the whole sequence in one block of
its own and takes the argmax of the last position (EOS masked before `min_tokens` and under
`ignore_eos`, else a stop on EOS).
"""

from __future__ import annotations

import torch
from torch import nn

from sut.llm.attention import PagedBatch
from sut.llm.model import kv_shape
from sut.llm.tokenizer import EOS

__all__ = ["greedy_decode"]


def greedy_decode(model: nn.Module, prompt: list[int], max_tokens: int,
                  ignore_eos: bool = False, min_tokens: int = 0) -> list[int]:
    """The output tokens of greedy decoding `prompt` for at most `max_tokens` tokens."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    shape = kv_shape(model)
    heads, dim = shape.num_kv_heads, shape.head_dim
    out: list[int] = []
    while len(out) < max_tokens:
        tokens = prompt + out
        n = len(tokens)
        cache = [(torch.zeros((1, n, heads, dim), dtype=dtype, device=device),
                  torch.zeros((1, n, heads, dim), dtype=dtype, device=device))
                 for _ in range(shape.num_layers)]
        span = torch.arange(n, device=device)
        batch = PagedBatch(cache, span, torch.zeros((1, 1), dtype=torch.long, device=device),
                           span[None], span[None], span)
        with torch.inference_mode():
            logits = model(torch.tensor(tokens, device=device), span, batch)[-1]
            if len(out) < min_tokens or ignore_eos:
                logits[EOS] = float("-inf")
        token = int(logits.argmax())
        out.append(token)
        if token == EOS:
            break
    return out
