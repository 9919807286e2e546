"""Models, the block manager, the tokenizer, request parsing and the serve CLI's checks."""

from __future__ import annotations

import pytest
import torch

from loadgen.cli.main import main
from sut.errors import ConfigError, InvalidInput, ModelLoadError
from sut.llm.blocks import BlockManager, chain_hash
from sut.llm.config import EngineConfig, parse_engine_options
from sut.llm.engine import LLMEngine
from sut.llm.model import kv_shape, load_causal_model
from sut.llm.protocol import parse_generate, parse_openai
from sut.llm.reference import greedy_decode
from sut.llm.sequence import SamplingParams
from sut.llm.tokenizer import BOS, EOS, Detokenizer, chat_prompt, decode, encode
from tests.sut.llm.conftest import Runner

USER = "causal:tests.sut.llm.causal_models"


def test_seeded_models_are_deterministic_and_user_models_load() -> None:
    a, b = load_causal_model("tiny-llm", seed=3), load_causal_model("tiny-llm", seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))
    assert not torch.equal(a.embed.weight, load_causal_model("tiny-llm", seed=4).embed.weight)
    user = load_causal_model(f"{USER}:three_layers")
    assert kv_shape(user).num_layers == 3
    assert len(greedy_decode(user, encode("hi"), 5, ignore_eos=True)) == 5
    with pytest.raises(ModelLoadError, match="not an nn.Module"):
        load_causal_model(f"{USER}:not_a_module")
    with pytest.raises(ModelLoadError, match="vocab_size"):
        load_causal_model(f"{USER}:no_attributes")
    with pytest.raises(ConfigError, match="unknown LLM"):
        load_causal_model("huge-llm")


def test_user_model_serves_through_the_engine() -> None:
    engine = LLMEngine.build(f"{USER}:three_layers", EngineConfig(device="cpu", block_size=4))
    engine.start()
    try:
        [out] = Runner(engine).run([encode("hello")], SamplingParams(max_tokens=6,
                                                                     ignore_eos=True))
        assert out.text == decode(greedy_decode(engine.runner.model, encode("hello"), 6, True))
    finally:
        engine.stop()


def test_prefix_blocks_are_found_shared_and_evicted_last() -> None:
    blocks = BlockManager(num_blocks=4, block_size=2, prefix_caching=True)
    tokens = [1, 2, 3, 4, 5]
    assert blocks.probe(tokens) == ([], [])
    held = blocks.take((), 3)
    first = chain_hash(b"", [1, 2])
    blocks.register(held[0], first)
    blocks.register(held[1], chain_hash(first, [3, 4]))
    blocks.release(held)
    assert blocks.num_free == 4
    hits, _ = blocks.probe(tokens)
    assert hits == held[:2]
    assert blocks.probe([1, 2, 3, 4]) == (held[:1], [first])  # the last token is never a hit
    assert blocks.can_take(hits, 2) and not blocks.can_take(hits, 3)
    again = blocks.take(hits, 2)
    assert again[:2] == held[:2] and blocks.num_free == 0
    blocks.release(again)
    fresh = blocks.take((), 4)  # takes the fresh ones, then evicts the cached ones
    assert sorted(fresh) == [0, 1, 2, 3] and blocks.probe(tokens) == ([], [])


def test_tokenizer_and_detokenizer() -> None:
    assert encode("hé") == [BOS, 104, 0xC3, 0xA9] and decode([BOS, 104, EOS]) == "h"
    detok = Detokenizer()
    assert [detok.push(t) for t in (104, 0xC3, 0xA9, EOS)] == ["h", "", "é", ""]
    assert chat_prompt([{"role": "user", "content": "x"}]) == "<|user|>\nx\n<|assistant|>\n"


def test_request_parsing() -> None:
    g = parse_openai({"prompt": "ab", "max_tokens": 3, "stop": "x", "priority": 2,
                      "stream": True, "stream_options": {"include_usage": True}}, False, 512)
    assert g.prompt == [BOS, 97, 98] and g.params.max_tokens == 3 and g.params.stop == ("x",)
    assert g.priority == 2 and g.stream and g.include_usage and not g.continuous_usage
    assert g.params.temperature == 1.0  # OpenAI's default
    chat = parse_openai({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "hi"}]}]}, True, 100)
    assert chat.params.max_tokens == 100 - len(chat.prompt)
    assert parse_generate({"text_input": "a"}, True, 512).params.temperature == 0.0
    for bad in ({"prompt": "a", "temperature": "hot"}, {"prompt": "a", "seed": 1.5},
                {"prompt": "a", "stop": 3}, {"prompt": "a", "ignore_eos": "yes"}, []):
        with pytest.raises(InvalidInput):
            parse_openai(bad, False, 512)


def test_engine_options_are_checked() -> None:
    assert parse_engine_options({"enable_prefix_caching": "off"}).enable_prefix_caching is False
    with pytest.raises(ConfigError, match="max_num_seqs"):
        parse_engine_options({"max_num_seq": "4"})
    with pytest.raises(ConfigError, match="block_size"):
        parse_engine_options({"block_size": "0"})
    with pytest.raises(ConfigError, match="device"):
        parse_engine_options({"device": "tpu"})


def test_serve_refuses_engine_knobs_for_a_non_llm(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--model", "mlp", "--max-num-seqs", "4"]) == 2
    assert "--max-num-seqs is an LLM engine knob" in capsys.readouterr().err
    assert main(["serve", "--model", "tiny-llm", "--scheduler", "dynamic"]) == 2
    assert "scheduler" in capsys.readouterr().err


def test_a_model_that_fails_its_warm_up_is_a_load_error(caplog: pytest.LogCaptureFixture) -> None:
    engine = LLMEngine.build(f"{USER}:broken_forward", EngineConfig(device="cpu"))
    with pytest.raises(ModelLoadError, match="kernel missing"):
        engine.start()
