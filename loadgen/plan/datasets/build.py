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

Sample i of the run is row i mod rows. With `dataset_turns` (ShareGPT only) each
conversation is a multi-turn session: its human turns in order, each with its reference
answer's length as the output; the filters keep a conversation whose every turn passes them,
and `dataset_samples` draws conversations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from loadgen.errors import SettingsError
from loadgen.plan.datasets.jsonl import read_jsonl
from loadgen.plan.datasets.lines import read_lines
from loadgen.plan.datasets.rows import DatasetRow
from loadgen.plan.datasets.sharegpt import read_sharegpt, read_sharegpt_conversations
from loadgen.plan.lengths import LengthDist
from loadgen.plan.prompts import Prompt
from loadgen.plan.words import count_tokens

__all__ = ["DatasetPrompts", "dataset_prompts"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DatasetPrompts:
    """Prompts read from a dataset file; sample i is row i mod rows."""

    path: str
    prompts: tuple[Prompt, ...]
    tokenizer: str = "approx"
    dataset_format: str = "jsonl"
    conversations: tuple[tuple[int, int], ...] | None = None
    """`dataset_turns`: each conversation's (first prompt index, turns); sample s starts
    conversation s mod conversations (`engine.conversations`)."""

    def prompt(self, index: int) -> Prompt:
        """The row of one sample index."""
        return self.prompts[index % len(self.prompts)]

    def describe(self) -> dict[str, Any]:
        """Plain values for the plan's record."""
        return {"kind": "dataset", "path": self.path, "format": self.dataset_format,
                "rows": len(self.prompts), "tokenizer": self.tokenizer,
                "conversations": None if self.conversations is None
                else len(self.conversations),
                "mean_input_tokens": sum(p.input_tokens for p in self.prompts) / len(self.prompts),
                "mean_output_tokens": sum(p.max_tokens for p in self.prompts) / len(self.prompts)}


def _within(value: int, low: int, high: int) -> bool:
    return value >= low and (not high or value <= high)


def _row_prompt(s: Any, row: DatasetRow, fallback: int) -> Prompt | None:
    """A row's prompt, its lengths the file's, else counted (`fallback`: the drawn output
    length); None when the length filters drop it."""
    inputs = row.input_tokens or count_tokens(row.text, s.tokenizer)
    outputs = row.output_tokens or (count_tokens(row.output_text, s.tokenizer)
                                    if row.output_text else fallback)
    if _within(inputs, s.dataset_min_input, s.dataset_max_input) and outputs >= 1 \
            and _within(outputs, s.dataset_min_output, s.dataset_max_output):
        return Prompt(row.text, inputs, outputs, s.fixed_output)
    return None


def _sampled(s: Any, kept: list[T], what: str) -> list[T]:
    """`dataset_samples` seeded draws of the kept rows (or conversations); all without."""
    if not s.dataset_samples:
        return kept
    rng = np.random.default_rng((s.workload_rng_seed, 9))
    if s.dataset_replacement:
        picks = rng.integers(0, len(kept), s.dataset_samples)
    else:
        if s.dataset_samples > len(kept):
            raise SettingsError([(f"dataset_samples: {s.dataset_samples} without "
                                 f"replacement, but only {len(kept)} {what} are kept")])
        picks = rng.permutation(len(kept))[:s.dataset_samples]
    return [kept[i] for i in picks.tolist()]


def _file_prompts(s: Any, output: LengthDist) -> list[Prompt]:
    rows: list[DatasetRow] = (read_sharegpt(s.dataset) if s.dataset_format == "sharegpt"
                              else read_jsonl(s.dataset))
    drawn = output.draw(np.random.default_rng((s.workload_rng_seed, 3)), max(len(rows), 1))
    prompts = [p for row, fallback in zip(rows, drawn.tolist(), strict=False)
               if (p := _row_prompt(s, row, int(fallback))) is not None]
    if not prompts:
        raise SettingsError([(f"dataset: {s.dataset}: no row is left (of {len(rows)}) after "
                             "the length filters")])
    return _sampled(s, prompts, "rows")


def _conversation_prompts(s: Any) -> tuple[list[Prompt], tuple[tuple[int, int], ...]]:
    """ShareGPT conversations as sessions (`dataset_turns`): every kept turn's prompt, in
    order, and each conversation's (first prompt index, turns). A conversation is kept when
    every turn passes the length filters."""
    found = read_sharegpt_conversations(s.dataset)
    kept: list[list[Prompt]] = []
    for rows in found:
        made = [_row_prompt(s, row, 0) for row in rows]
        turns = [p for p in made if p is not None]
        if len(turns) == len(made):
            kept.append(turns)
    if not kept:
        raise SettingsError([(f"dataset: {s.dataset}: no conversation is left (of "
                             f"{len(found)}) after the length filters")])
    prompts: list[Prompt] = []
    layout = []
    for conversation in _sampled(s, kept, "conversations"):
        layout.append((len(prompts), len(conversation)))
        prompts += conversation
    return prompts, tuple(layout)


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
    if s.dataset_turns:
        prompts, layout = _conversation_prompts(s)
        return DatasetPrompts(s.dataset, tuple(prompts), s.tokenizer, s.dataset_format, layout)
    make = _line_prompts if s.dataset_format == "lines" else _file_prompts
    return DatasetPrompts(s.dataset, tuple(make(s, output)), s.tokenizer, s.dataset_format)
