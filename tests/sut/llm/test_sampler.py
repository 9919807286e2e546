"""The sampler's one greedy rule: a temperature below `GREEDY_BELOW` takes the argmax, in
`sample` and in the runner's fast path alike."""

from __future__ import annotations

import torch

from sut.llm.runner import _greedy
from sut.llm.sampler import GREEDY_BELOW, is_greedy, sample
from sut.llm.sequence import SamplingParams, Sequence
from sut.llm.tokenizer import EOS


def _seq(temperature: float) -> Sequence:
    params = SamplingParams(temperature=temperature, seed=3, ignore_eos=True)
    return Sequence(0, [1, 2], params, lambda delta: None, 0)


def test_a_temperature_below_the_bound_is_greedy_everywhere() -> None:
    assert is_greedy(SamplingParams(temperature=0.0))
    assert is_greedy(SamplingParams(temperature=GREEDY_BELOW / 2))
    assert not is_greedy(SamplingParams(temperature=GREEDY_BELOW))
    logits = torch.zeros(2, 300)
    logits[:, 7], logits[:, EOS] = 1.0, 5.0  # EOS is masked (ignore_eos): 7 is the argmax
    tiny = [_seq(GREEDY_BELOW / 2), _seq(0.0)]
    assert sample(logits, tiny) == [7, 7]
    fast = _greedy(logits, [0, 1], tiny)
    assert fast is not None and fast.tolist() == [7, 7]
    assert _greedy(logits, [0, 1], [_seq(1.0), _seq(0.0)]) is None  # a sampled row: `sample`
