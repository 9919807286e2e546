"""A token workload's prompts, built once from the settings, seeded and deterministic.

`prompts_for(settings)` returns None for a run without a token workload, else a
`PromptSource` that maps each sample index of the library to a `Prompt`:

* synthetic (`input_tokens` set): input and output lengths drawn per sample
  from their distributions (`plan.lengths`), the text made of common short
  words; with `prefix_tokens` and `prefix_groups`, sample i starts with the
  shared prefix of group i mod groups (the prompt is the prefix plus its own
  `input_tokens`);
* a dataset (`dataset`, in `dataset_format` jsonl, sharegpt or lines:
  `plan.datasets.build`); sample i is row i mod rows;
* a trace replay whose file carries `input_tokens` and `output_tokens`
  columns, or a named trace (`trace_format`: mooncake, azure, burstgpt,
  `plan.traces`): query i gets row i's lengths (`in_order`: the schedule then
  hands query i sample index i, `plan.schedule`); a Mooncake trace's prompts are
  its hash blocks (`traces.blocks`), so its prefix sharing is exact;
* agentic jobs (`session_file`, `plan.jobs`): each request's prompt, by the index its
  job's step names.

Token lengths are counted by `tokenizer`: `approx` (one token per word or
punctuation mark: each word of the synthetic text is one token, as a GPT-style
tokenizer pre-splits it) or `bytes` (one token per UTF-8 byte, exact for a
byte-vocabulary model). Nothing is downloaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.plan.datasets.build import DatasetPrompts, dataset_prompts
from loadgen.plan.jobs import read_jobs
from loadgen.plan.lengths import LengthDist
from loadgen.plan.prefixcache import prefix_for_target
from loadgen.plan.prompts import Prompt, PromptSource
from loadgen.plan.settings import IssueMode, TestSettings, issue_mode
from loadgen.plan.tracelengths import read_trace_lengths
from loadgen.plan.traces.blocks import BlockPrompts
from loadgen.plan.traces.named import read_named_trace
from loadgen.plan.words import count_tokens, synthetic_text

__all__ = ["TOKENIZERS", "DatasetPrompts", "SyntheticPrompts", "count_tokens", "prompts_for",
           "synthetic_text"]

TOKENIZERS = ("approx", "bytes")


@dataclass(frozen=True, slots=True)
class SyntheticPrompts:
    """Random-word prompts of drawn lengths, optionally behind shared prefixes."""

    input_lengths: np.ndarray  # per sample index, the tokens after the prefix
    output_lengths: np.ndarray
    fixed_output: bool
    prefix_tokens: int
    prefix_groups: int
    tokenizer: str
    seed: int
    in_order: bool = False  # sample i is query i (a trace's lengths), not a library draw

    def prompt(self, index: int) -> Prompt:
        """The prompt of one sample index (the same text every time)."""
        index %= self.input_lengths.size
        body = synthetic_text(np.random.default_rng((self.seed, 1, index)),
                              int(self.input_lengths[index]), self.tokenizer)
        prefix = ""
        if self.prefix_tokens:
            group = index % self.prefix_groups
            prefix = synthetic_text(np.random.default_rng((self.seed, 2, group)),
                                    self.prefix_tokens, self.tokenizer)
        return Prompt(prefix + body, self.prefix_tokens + int(self.input_lengths[index]),
                      int(self.output_lengths[index]), self.fixed_output)

    def describe(self) -> dict[str, Any]:
        """Plain values for the plan's record."""
        return {"kind": "trace" if self.in_order else "synthetic",
                "samples": int(self.input_lengths.size),
                "mean_input_tokens": self.prefix_tokens + float(self.input_lengths.mean()),
                "mean_output_tokens": float(self.output_lengths.mean()),
                "fixed_output": self.fixed_output, "prefix_tokens": self.prefix_tokens,
                "prefix_groups": self.prefix_groups, "tokenizer": self.tokenizer,
                "seed": self.seed}


def prompts_for(settings: TestSettings) -> PromptSource | None:
    """The run's prompts, or None when it has no token workload."""
    s = settings
    if s.session_file:
        return read_jobs(s.session_file, s.tokenizer, s.workload_rng_seed, s.fixed_output)
    replay = issue_mode(s) is IssueMode.OPEN and s.arrival == "trace" and not s.schedule_file
    if replay and s.trace_format != "auto":
        rows = read_named_trace(s.trace_file, s.trace_format, s.trace_block_tokens)
        if rows.hash_ids is not None:
            return BlockPrompts(rows, s.trace_block_tokens, s.tokenizer, s.workload_rng_seed,
                                s.fixed_output)
        return SyntheticPrompts(rows.input_tokens, rows.output_tokens, s.fixed_output,
                                0, 1, s.tokenizer, s.workload_rng_seed, in_order=True)
    lengths = read_trace_lengths(s.trace_file) if replay else None
    if lengths is not None:
        return SyntheticPrompts(lengths.input_tokens, lengths.output_tokens, s.fixed_output,
                                0, 1, s.tokenizer, s.workload_rng_seed, in_order=True)
    if s.input_tokens is None and not s.dataset:
        return None
    output = s.output_tokens or LengthDist("fixed", 128.0)
    if s.dataset:
        return dataset_prompts(s, output)
    assert s.input_tokens is not None
    count = s.total_sample_count
    prefix = prefix_for_target(s)
    inputs = s.input_tokens.draw(np.random.default_rng((s.workload_rng_seed, 0)), count)
    if prefix != s.prefix_tokens:  # a target hit rate: the prefix is part of input_tokens
        inputs = np.maximum(inputs - prefix, 1)
    return SyntheticPrompts(
        input_lengths=inputs,
        output_lengths=output.draw(np.random.default_rng((s.workload_rng_seed, 3)), count),
        fixed_output=s.fixed_output, prefix_tokens=prefix,
        prefix_groups=max(s.prefix_groups, 1), tokenizer=s.tokenizer, seed=s.workload_rng_seed)
