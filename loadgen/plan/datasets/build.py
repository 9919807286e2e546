"""A dataset's prompts for the run: loaded by `dataset_format`, counted, filtered by length,
sampled (seeded, with or without replacement).

* `jsonl` and `sharegpt`: a row's lengths are the file's, else counted by `tokenizer`
  (the input from the prompt, the output from ShareGPT's reference answer), else the
  output drawn from `output_tokens`. Rows outside `dataset_min_input`..`dataset_max_input`
  or `dataset_min_output`..`dataset_max_output` (0 = no bound) are dropped. With
  `dataset_samples` N the run's rows are N seeded draws (`dataset_replacement`: with
  replacement, else a permutation's first N); without, every kept row in file order.
* `lines`: `total_sample_count` prompts, each the shared prefix of `prefix_tokens` tokens
  (the pool's first lines) and `input_tokens` more of seeded random lines, exact under
  `tokenizer` (but for a multi-byte character at a `bytes` cut).

Sample i of the run is row i mod rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.errors import SettingsError
from loadgen.plan.datasets.jsonl import read_jsonl
from loadgen.plan.datasets.lines import read_lines
from loadgen.plan.datasets.rows import DatasetRow
from loadgen.plan.datasets.sharegpt import read_sharegpt
from loadgen.plan.lengths import LengthDist
from loadgen.plan.prompts import Prompt
from loadgen.plan.words import count_tokens

__all__ = ["DatasetPrompts", "dataset_prompts"]


@dataclass(frozen=True, slots=True)
class DatasetPrompts:
    """Prompts read from a dataset file; sample i is row i mod rows."""

    path: str
    prompts: tuple[Prompt, ...]
    tokenizer: str = "approx"
    dataset_format: str = "jsonl"

    def prompt(self, index: int) -> Prompt:
        """The row of one sample index."""
        return self.prompts[index % len(self.prompts)]

    def describe(self) -> dict[str, Any]:
        """Plain values for the plan's record."""
        return {"kind": "dataset", "path": self.path, "format": self.dataset_format,
                "rows": len(self.prompts), "tokenizer": self.tokenizer,
                "mean_input_tokens": sum(p.input_tokens for p in self.prompts) / len(self.prompts),
                "mean_output_tokens": sum(p.max_tokens for p in self.prompts) / len(self.prompts)}


def _within(value: int, low: int, high: int) -> bool:
    return value >= low and (not high or value <= high)


def _file_prompts(s: Any, output: LengthDist) -> list[Prompt]:
    rows: list[DatasetRow] = (read_sharegpt(s.dataset) if s.dataset_format == "sharegpt"
                              else read_jsonl(s.dataset))
    drawn = output.draw(np.random.default_rng((s.workload_rng_seed, 3)), max(len(rows), 1))
    prompts = []
    for row, fallback in zip(rows, drawn.tolist(), strict=False):
        inputs = row.input_tokens or count_tokens(row.text, s.tokenizer)
        outputs = row.output_tokens or (count_tokens(row.output_text, s.tokenizer)
                                        if row.output_text else int(fallback))
        if _within(inputs, s.dataset_min_input, s.dataset_max_input) and outputs >= 1 \
                and _within(outputs, s.dataset_min_output, s.dataset_max_output):
            prompts.append(Prompt(row.text, inputs, outputs, s.fixed_output))
    if not prompts:
        raise SettingsError([(f"dataset: {s.dataset}: no row is left (of {len(rows)}) after "
                             "the length filters")])
    if s.dataset_samples:
        rng = np.random.default_rng((s.workload_rng_seed, 9))
        if s.dataset_replacement:
            picks = rng.integers(0, len(prompts), s.dataset_samples)
        else:
            if s.dataset_samples > len(prompts):
                raise SettingsError([(f"dataset_samples: {s.dataset_samples} without "
                                     f"replacement, but only {len(prompts)} rows are kept")])
            picks = rng.permutation(len(prompts))[:s.dataset_samples]
        prompts = [prompts[i] for i in picks.tolist()]
    return prompts


def _line_prompts(s: Any, output: LengthDist) -> list[Prompt]:
    pool = read_lines(s.dataset)
    count = s.total_sample_count
    inputs = s.input_tokens.draw(np.random.default_rng((s.workload_rng_seed, 0)), count)
    outputs = output.draw(np.random.default_rng((s.workload_rng_seed, 3)), count)
    prefix = pool.prefix(s.prefix_tokens, s.tokenizer) if s.prefix_tokens else ""
    prompts = []
    for i, (n, m) in enumerate(zip(inputs.tolist(), outputs.tolist(), strict=True)):
        text = prefix + pool.body(np.random.default_rng((s.workload_rng_seed, 10, i)), n,
                                  s.tokenizer)
        prompts.append(Prompt(text, count_tokens(text, s.tokenizer), m, s.fixed_output))
    return prompts


def dataset_prompts(s: Any, output: LengthDist) -> DatasetPrompts:
    """The run's dataset prompts (`s`: validated TestSettings with `dataset` set)."""
    make = _line_prompts if s.dataset_format == "lines" else _file_prompts
    return DatasetPrompts(s.dataset, tuple(make(s, output)), s.tokenizer, s.dataset_format)
