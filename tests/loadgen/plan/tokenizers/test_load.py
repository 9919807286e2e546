"""Tokenizers from local files: a BPE trained here with `tokenizers` and saved as
tokenizer.json, and a tiktoken-style ranks file written here; prompts of exact token lengths
under each, client counts with the same tokenizer, and bad files refused."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.adapters.tokencount import ChunkCounter
from loadgen.api import run_test
from loadgen.errors import SettingsError
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import settings_from_mapping
from loadgen.plan.tokenizers.load import describe_tokenizer, file_tokenizer
from loadgen.plan.tokenizers.ranks import read_ranks
from loadgen.plan.words import count_tokens, synthetic_text
from loadgen.report.summary import render_summary

CORPUS = ("the of and to in is that for it as was with be by on not he this are or his from "
          "at which but have an they you were her she there been one all we their has would "
          "when if so no will more can out other into some time could them than its only new "
          "about also two may then do first any my now such like our over man me even most "
          "made after what many before must through back years much where your way well down")


def _trained(tmp_path: Path) -> str:
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = tmp_path / "corpus.txt"
    text.write_text("\n".join([CORPUS] * 20))
    tok.train([str(text)], trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def _ranks(tmp_path: Path) -> str:
    merges = [b" t", b" th", b" the", b" o", b" of", b" a", b" an", b" and", b"in", b" in",
              b" w", b" wa", b" was", b" i", b" is"]
    tokens = [bytes([b]) for b in range(256)] + merges
    path = tmp_path / "small.tiktoken"
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(tokens)))
    return str(path)


@pytest.fixture(params=["tokenizer.json", "ranks"])
def tokenizer(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _trained(tmp_path) if request.param == "tokenizer.json" else _ranks(tmp_path)


def test_synthetic_prompts_have_exact_lengths(tokenizer: str) -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 7, 50, 333):
        text = synthetic_text(rng, n, tokenizer)
        assert count_tokens(text, tokenizer) == n == file_tokenizer(tokenizer).count(text)
    settings = {"scenario": "Server", "target_qps": 10.0, "target_latency_ms": 100.0,
                "tokenizer": tokenizer, "total_sample_count": 40,
                "performance_sample_count": 40,
                "input_tokens": {"dist": "uniform", "min": 5, "max": 90}, "prefix_tokens": 16}
    plan = RunPlan.of(settings_from_mapping(settings))
    assert plan.prompts is not None
    for i in range(40):
        p = plan.prompts.prompt(i)
        assert count_tokens(p.text, tokenizer) == p.input_tokens
    assert plan.as_dict()["tokens"]["prompts"]["tokenizer"] == tokenizer


def test_client_counts_use_the_file(tokenizer: str) -> None:
    counter = ChunkCounter(tokenizer)
    text = " the of and was is in"
    assert counter.count_text(text) == file_tokenizer(tokenizer).count(text)
    if tokenizer.endswith(".tiktoken"):
        assert counter.count_text(text) == 6  # each word a merged token of the ranks file
        assert counter.count_text(" xyz") == 4  # no merge: a byte each


def test_a_ranks_file_needs_every_byte_and_base64(tmp_path: Path) -> None:
    path = tmp_path / "bad.tiktoken"
    path.write_text("dA== 0\n")
    with pytest.raises(SettingsError, match="255 single bytes have no rank"):
        read_ranks(path)
    path.write_text("dA== 0\n!!! 1\n")
    with pytest.raises(SettingsError, match=rf"{path}:2: token: not base64"):
        read_ranks(path)


def test_an_unknown_tokenizer_is_refused() -> None:
    with pytest.raises(SettingsError, match="not approx, bytes or a tokenizer file"):
        settings_from_mapping({"scenario": "Server", "target_qps": 1.0,
                               "target_latency_ms": 100.0, "input_tokens": 8,
                               "tokenizer": "/nonexistent/tokenizer.json"})


def test_the_result_and_summary_say_which_tokenizer_counted(tokenizer: str,
                                                            tmp_path: Path) -> None:
    settings = settings_from_mapping({
        "scenario": "Server", "arrival": "constant", "target_qps": 40.0, "preset": "dev",
        "min_duration_s": 0.2, "min_query_count": 8, "target_latency_ms": 1000.0,
        "target_latency_percentile": 50.0, "max_issue_lag_ms": 1000.0, "tokenizer": tokenizer,
        "input_tokens": 12, "output_tokens": 3})
    result = run_test(settings, "llmsim:step_base=1ms", out_dir=tmp_path / "run")
    counted = json.loads((tmp_path / "run/result.json").read_text())["tokens"]["tokenizer"]
    kind = "tokenizer.json" if tokenizer.endswith(".json") else "ranks"
    assert counted == {"name": Path(tokenizer).name, "kind": kind, "path": tokenizer}
    assert f"counted by tokenizer {Path(tokenizer).name} ({kind})" in render_summary(result)


def test_a_built_in_counter_is_named_alone() -> None:
    assert describe_tokenizer("approx") == {"name": "approx", "kind": "approx"}
    assert describe_tokenizer("bytes") == {"name": "bytes", "kind": "bytes"}
