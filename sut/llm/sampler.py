"""Pick the next token of each sequence from its logits: greedy, or seeded sampling.

A row is greedy when its temperature is below `GREEDY_BELOW` (`is_greedy`: vLLM's rule, and
the one rule every greedy path uses) and takes the argmax. A sampled row applies temperature,
top-k and top-p in float64 (any finite temperature divides safely; the likeliest token survives
any top_p), then draws with a generator seeded from (the request's seed, the output position),
folded to 64 bits, so a sequence preempted and recomputed, or batched differently, draws the
same tokens. EOS is masked where it would not end the sequence (short of `min_tokens`, or
`ignore_eos`), so every token but a closing EOS is text.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq

import torch

from sut.llm.sequence import SamplingParams, Sequence
from sut.llm.tokenizer import EOS

__all__ = ["GREEDY_BELOW", "is_greedy", "sample"]

GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS: a smaller temperature is too small to divide by

_SEED_STRIDE = 1_000_003


def is_greedy(params: SamplingParams) -> bool:
    """Whether a request takes the argmax: its temperature is below `GREEDY_BELOW`."""
    return params.temperature < GREEDY_BELOW


def sample(logits: torch.Tensor, seqs: Seq[Sequence]) -> list[int]:
    """One token per row of `logits` ([N, vocab]), row i for `seqs[i]`."""
    blocked = [i for i, seq in enumerate(seqs) if not seq.eos_allowed()]
    if blocked:
        logits = logits.clone()
        logits[blocked, EOS] = float("-inf")
    picked = logits.argmax(dim=-1)
    random_rows = [i for i, seq in enumerate(seqs) if not is_greedy(seq.params)]
    if not random_rows:
        return [int(t) for t in picked.tolist()]
    tokens = [int(t) for t in picked.tolist()]
    for row in random_rows:
        tokens[row] = _draw(logits[row].double().cpu(), seqs[row])
    return tokens


def _draw(logits: torch.Tensor, seq: Sequence) -> int:
    params = seq.params
    scaled = logits / params.temperature
    if params.top_k > 0:
        kth = torch.topk(scaled, min(params.top_k, scaled.numel())).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    probs = torch.softmax(scaled, dim=-1)
    if params.top_p < 1.0:
        ordered, order = torch.sort(probs, descending=True)
        keep = ordered.cumsum(0) - ordered < params.top_p
        keep[0] = True  # the likeliest token stays, however small top_p is
        probs = torch.zeros_like(probs).scatter_(0, order[keep], ordered[keep])
    generator = torch.Generator().manual_seed(
        ((seq.params.seed or 0) * _SEED_STRIDE + len(seq.output)) % 2**64)
    return int(torch.multinomial(probs, 1, generator=generator).item())
