"""Dataset formats through the plan: ShareGPT's first human turn with its answer's length,
JSON lines with `prompt` or `messages`, a line pool with an exact shared prefix; length
filters; seeded sampling with and without replacement; a malformed row names file, line, field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.errors import SettingsError
from loadgen.plan.datasets.build import DatasetPrompts
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import settings_from_mapping
from loadgen.plan.words import count_tokens

SHAREGPT = [
    {"id": "a", "conversations": [{"from": "human", "value": "Name three rivers."},
                                  {"from": "gpt", "value": "The Nile, the Amazon and the Rhine."},
                                  {"from": "human", "value": "Which is longest?"},
                                  {"from": "gpt", "value": "The Nile."}]},
    {"id": "b", "conversations": [{"from": "gpt", "value": "Hello!"}]},  # no human turn: skipped
    {"id": "c", "conversations": [{"from": "system", "value": "Be brief."},
                                  {"from": "human", "value": "Why is the sky blue?"},
                                  {"from": "gpt", "value": "Rayleigh scattering."}]},
]


def _plan(path: Path, **more: Any) -> DatasetPrompts:
    settings = {"scenario": "Server", "target_qps": 10.0, "target_latency_ms": 100.0,
                "dataset": str(path), **more}
    prompts = RunPlan.of(settings_from_mapping(settings)).prompts
    assert isinstance(prompts, DatasetPrompts)
    return prompts


def test_sharegpt_first_human_turn_and_its_answer_length(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT, indent=1))
    prompts = _plan(path, dataset_format="sharegpt").prompts
    assert [p.text for p in prompts] == ["Name three rivers.", "Why is the sky blue?"]
    assert [p.input_tokens for p in prompts] == [4, 6]  # approx: words and marks
    assert [p.max_tokens for p in prompts] == [count_tokens("The Nile, the Amazon and the Rhine.",
                                                            "approx"), 3]


def test_jsonl_prompt_or_messages(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (
        {"prompt": "one two three", "output_tokens": 5},
        {"messages": [{"role": "system", "content": "Be brief."},
                      {"role": "user", "content": "Hi there"}]},
    )) + "\n")
    prompts = _plan(path, output_tokens=7).prompts
    assert [(p.text, p.input_tokens, p.max_tokens) for p in prompts] == [
        ("one two three", 3, 5), ("Be brief.\nHi there", 5, 7)]


def test_length_filters_and_seeded_sampling(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"prompt": " ".join(["w"] * n), "output_tokens": n})
                            + "\n" for n in range(1, 21)))
    kept = _plan(path, dataset_min_input=5, dataset_max_input=15, dataset_max_output=12).prompts
    assert [p.input_tokens for p in kept] == list(range(5, 13))
    drawn = _plan(path, dataset_samples=20)
    assert sorted(p.input_tokens for p in drawn.prompts) == list(range(1, 21))  # a permutation
    assert [p.input_tokens for p in drawn.prompts] != list(range(1, 21))
    assert _plan(path, dataset_samples=20).prompts == drawn.prompts  # seeded
    again = _plan(path, dataset_samples=50, dataset_replacement=True).prompts
    assert len(again) == 50 and len({p.input_tokens for p in again}) < 20  # repeats
    with pytest.raises(SettingsError, match="dataset_samples: 50 without replacement"):
        _plan(path, dataset_samples=50)
    with pytest.raises(SettingsError, match="no row is left"):
        _plan(path, dataset_min_input=30)


@pytest.mark.parametrize("tokenizer", ["approx", "bytes"])
def test_a_line_pool_gives_exact_lengths_behind_a_shared_prefix(tmp_path: Path,
                                                                tokenizer: str) -> None:
    path = tmp_path / "sonnet.txt"
    path.write_text("Shall I compare thee to a summer's day?\n"
                    "Thou art more lovely and more temperate:\n\n"
                    "Rough winds do shake the darling buds of May,\n"
                    "And summer's lease hath all too short a date;\n")
    source = _plan(path, dataset_format="lines", input_tokens={"dist": "uniform", "min": 20,
                                                              "max": 60},
                   prefix_tokens=12, tokenizer=tokenizer, total_sample_count=30,
                   performance_sample_count=30)
    assert len(source.prompts) == 30
    first = source.prompts[0].text
    prefix = first[:12] if tokenizer == "bytes" else first[:len("Shall I compare thee to a "
                                                                "summer's day")]
    for p in source.prompts:
        assert p.text.startswith(prefix)
        assert p.input_tokens == count_tokens(p.text, tokenizer)
        assert 32 <= p.input_tokens <= 72  # 12 shared + 20..60 drawn, exact
    assert len({p.text for p in source.prompts}) > 25


@pytest.mark.parametrize(("fmt", "text", "line", "field"), [
    ("jsonl", '{"prompt": "a"}\n{"prompt": 3}\n', 2, "prompt"),
    ("jsonl", '{"prompt": "a"}\n\n{"prompt": "b", "output_tokens": 0}\n', 3, "output_tokens"),
    ("jsonl", '{"prompt": "a"}\n{"messages": [{"role": "user"}]}\n', 2, "messages"),
    ("jsonl", '{"prompt": "a"}\nnot json\n', 2, "row"),
    ("sharegpt", '[\n {"conversations": []},\n {"conversations": [{"from": "human"}]}\n]', 3,
     "conversations"),
    ("sharegpt", '[\n {"conversations": []},\n {"id": 4}\n]', 3, "conversations"),
    ("sharegpt", '{"conversations": []}\n\n{"conversations": [\n', 3, "row: not JSON"),
])
def test_a_malformed_row_names_file_line_field(tmp_path: Path, fmt: str, text: str, line: int,
                                               field: str) -> None:
    path = tmp_path / f"data.{fmt}"
    path.write_text(text)
    with pytest.raises(SettingsError, match=rf"dataset: {path}:{line}: {field}: "):
        _plan(path, dataset_format=fmt)


def test_sharegpt_conversations_as_sessions_keep_every_turn_in_order(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT, indent=1))
    prompts = _plan(path, dataset_format="sharegpt", dataset_turns=True)
    assert prompts.conversations == ((0, 2), (2, 1))  # "a" has two turns, "c" one
    assert [p.text for p in prompts.prompts] == ["Name three rivers.", "Which is longest?",
                                                 "Why is the sky blue?"]
    assert [p.max_tokens for p in prompts.prompts] == [
        count_tokens("The Nile, the Amazon and the Rhine.", "approx"), 3, 3]
    assert prompts.describe()["conversations"] == 2
    few = _plan(path, dataset_format="sharegpt", dataset_turns=True, dataset_max_input=5)
    assert few.conversations == ((0, 2),)  # "c"'s one turn has 6 tokens: dropped whole


def test_dataset_turns_needs_sharegpt_and_no_turns(tmp_path: Path) -> None:
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT))
    with pytest.raises(SettingsError, match="dataset_turns: the conversations of a ShareGPT"):
        _plan(path, dataset_turns=True)
    with pytest.raises(SettingsError, match="turns: with dataset_turns each conversation"):
        _plan(path, dataset_format="sharegpt", dataset_turns=True, turns=2)
    with pytest.raises(SettingsError, match="turns: multi-turn sessions start open loop"):
        _plan(path, dataset_format="sharegpt", dataset_turns=True, scenario="Offline")
