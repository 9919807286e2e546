"""Token workloads: length distributions with bounds, seeded prompts of exact token counts,
shared prefixes, JSON-lines datasets, MLPerf LLM presets, and every bad key named."""

import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.errors import SettingsError
from loadgen.plan.lengths import LengthDist
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import load_settings, settings_from_mapping, settings_from_record
from loadgen.plan.tokenslo import TokenSlos
from loadgen.plan.workload import DatasetPrompts, SyntheticPrompts, count_tokens

BASE = {"scenario": "Offline", "target_qps": 10.0, "total_sample_count": 64,
        "performance_sample_count": 64}


def _plan(**values: object) -> RunPlan:
    return RunPlan.of(settings_from_mapping(BASE | values))


def test_no_token_keys_no_prompts() -> None:
    plan = _plan()
    assert plan.prompts is None and not plan.token_targets.any and not plan.goodput_slos.any
    assert "tokens" not in plan.as_dict()


@pytest.mark.parametrize("tokenizer", ["approx", "bytes"])
def test_synthetic_prompts_have_the_drawn_length_exactly_and_repeat(tokenizer: str) -> None:
    plan = _plan(input_tokens={"dist": "uniform", "min": 5, "max": 40}, output_tokens=16,
                 tokenizer=tokenizer, fixed_output=True)
    assert isinstance(plan.prompts, SyntheticPrompts)
    lengths = set()
    for i in range(64):
        p = plan.prompts.prompt(i)
        assert count_tokens(p.text, tokenizer) == p.input_tokens
        assert 5 <= p.input_tokens <= 40 and p.max_tokens == 16 and p.fixed_output
        assert plan.prompts.prompt(i) == p  # the same text every time
        lengths.add(p.input_tokens)
    assert len(lengths) > 10
    again = _plan(input_tokens={"dist": "uniform", "min": 5, "max": 40}, tokenizer=tokenizer)
    assert again.prompts is not None and again.prompts.prompt(3).text == plan.prompts.prompt(3).text
    other = _plan(input_tokens={"dist": "uniform", "min": 5, "max": 40}, workload_rng_seed=1)
    assert other.prompts is not None and other.prompts.prompt(3) != plan.prompts.prompt(3)


@pytest.mark.parametrize(("dist", "mean"), [
    (LengthDist("normal", 200.0, std=40.0, min=1, max=10_000), 200.0),
    (LengthDist("lognormal", 200.0, sigma=0.5, min=1, max=100_000), 200.0),
    (LengthDist("fixed", 77.0), 77.0),
])
def test_distributions_have_their_mean(dist: LengthDist, mean: float) -> None:
    draws = dist.draw(np.random.default_rng(1), 100_000)
    assert draws.mean() == pytest.approx(mean, rel=0.02)


def test_bounds_clip_the_draws() -> None:
    dist = LengthDist("normal", 100.0, std=100.0, min=50, max=120)
    draws = dist.draw(np.random.default_rng(2), 10_000)
    assert draws.min() == 50 and draws.max() == 120


def test_shared_prefixes_group_the_prompts() -> None:
    plan = _plan(input_tokens=10, prefix_tokens=30, prefix_groups=4)
    assert plan.prompts is not None
    prompts = [plan.prompts.prompt(i) for i in range(8)]
    assert all(p.input_tokens == 40 for p in prompts)
    heads = [" ".join(p.text.split()[:30]) for p in prompts]
    assert heads[0] == heads[4] and heads[1] == heads[5] and len(set(heads)) == 4
    assert prompts[0].text != prompts[4].text  # the bodies differ


def test_a_dataset_gives_its_rows_in_turn(tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    rows = [{"prompt": "Hello there, world", "output_tokens": 9},
            {"text": "one two", "input_tokens": 5}]
    path.write_text("\n".join(map(json.dumps, rows)) + "\n\n")
    toml = tmp_path / "run.toml"
    toml.write_text('scenario = "Offline"\ndataset = "prompts.jsonl"\noutput_tokens = 33\n'
                    "total_sample_count = 4\nperformance_sample_count = 4\n")
    plan = RunPlan.of(load_settings(toml))
    assert isinstance(plan.prompts, DatasetPrompts)
    first, second = plan.prompts.prompt(0), plan.prompts.prompt(1)
    assert (first.text, first.input_tokens, first.max_tokens) == ("Hello there, world", 4, 9)
    assert (second.input_tokens, second.max_tokens) == (5, 33)
    assert plan.prompts.prompt(2) == first
    assert plan.as_dict()["tokens"]["prompts"]["rows"] == 2


def test_a_bad_dataset_row_is_named(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"prompt": "fine"}\n{"no": 1}\nnot json\n')
    with pytest.raises(SettingsError) as err:
        _plan(dataset=str(path))
    text = str(err.value)
    assert "bad.jsonl:2" in text and "bad.jsonl:3" in text


@pytest.mark.parametrize(("values", "needle"), [
    ({"input_tokens": {"dist": "zipf"}}, "dist 'zipf'"),
    ({"input_tokens": {"dist": "uniform", "min": 5}}, "uniform needs max"),
    ({"input_tokens": {"dist": "uniform", "min": 9, "max": 3}}, "1 <= min <= max"),
    ({"input_tokens": {"dist": "normal", "mean": 9, "std": 1, "shape": 2}}, "not shape"),
    ({"input_tokens": "many"}, "expected a token count"),
    ({"output_tokens": 0}, "fixed length"),
    ({"tokenizer": "bpe"}, "tokenizer"),
    ({"mlperf_model": "llama2-7b"}, "mlperf_model"),
    ({"prefix_tokens": 8}, "set input_tokens"),
    ({"dataset": "/nonexistent.jsonl"}, "no such file"),
    ({"scenario": "Server", "use_token_latencies": True, "ttft_latency_ms": 100.0},
     "tpot_latency_ms: token mode"),
])
def test_bad_token_settings_are_named(values: dict[str, object], needle: str) -> None:
    with pytest.raises(SettingsError) as err:
        settings_from_mapping(BASE | values)
    assert needle in str(err.value)


def test_mlperf_llm_presets_set_token_mode_and_their_bounds() -> None:
    s = settings_from_mapping({"scenario": "Server", "mlperf_model": "llama2-70b-interactive",
                               "target_qps": 2.0})
    assert s.use_token_latencies and s.target_latency_ms == 0
    assert (s.ttft_latency_ms, s.tpot_latency_ms) == (450.0, 40.0)
    plan = RunPlan.of(s)
    assert plan.token_targets == TokenSlos(450_000_000, 40_000_000)
    assert plan.goodput_slos == TokenSlos(450_000_000, 40_000_000)  # falls back on the targets
    server = settings_from_mapping({"scenario": "Server", "mlperf_model": "llama2-70b",
                                    "tpot_latency_ms": 150.0})
    assert (server.ttft_latency_ms, server.tpot_latency_ms) == (2000.0, 150.0)  # file wins


def test_goodput_slos_of_their_own() -> None:
    plan = _plan(input_tokens=8, goodput_ttft_ms=5.0, goodput_itl_ms=2.0, goodput_e2e_ms=50.0)
    assert plan.goodput_slos == TokenSlos(5_000_000, 0, 2_000_000, 50_000_000)
    assert not plan.token_targets.any


def test_lengths_survive_the_record() -> None:
    s = settings_from_mapping(BASE | {"input_tokens": {"dist": "lognormal", "mean": 300,
                                                       "sigma": 0.4, "max": 900},
                                      "output_tokens": 12})
    doc = s.as_dict()
    assert doc["output_tokens"] == {"dist": "fixed", "value": 12}
    assert settings_from_record(json.loads(json.dumps(doc))) == s
