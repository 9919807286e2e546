"""The LLM server's field checks, without a socket: every hostile value is an InvalidInput
naming its field, every ordinary value passes unchanged."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sut.errors import InvalidInput
from sut.llm import checks
from sut.llm.protocol import parse_generate, parse_openai


@pytest.mark.parametrize(("value", "ok"), [
    (0.5, True), (2, True), (None, True), (math.inf, False), (math.nan, False),
    (-math.inf, False), (10**400, False), (True, False), ("1", False), ([1], False),
])
def test_number(value: Any, ok: bool) -> None:
    if ok:
        assert checks.number({"t": value}, "t", 1.0) == (1.0 if value is None else value)
    else:
        with pytest.raises(InvalidInput, match="^t:"):
            checks.number({"t": value}, "t", 1.0)


@pytest.mark.parametrize(("value", "ok"), [
    (3, True), (3.0, True), (-(2**63), True), (2**63, False), (3.5, False),
    (math.inf, False), (math.nan, False), (1e300, False), (False, False), ("3", False),
])
def test_integer(value: Any, ok: bool) -> None:
    if ok:
        assert checks.integer({"k": value}, "k", 0) == int(value)
    else:
        with pytest.raises(InvalidInput, match="^k:"):
            checks.integer({"k": value}, "k", 0)


def test_text_refuses_lone_surrogates_and_keeps_the_rest() -> None:
    assert checks.text("héllo ✓ 😀", "prompt") == "héllo ✓ 😀"
    for bad in ("\ud800", "a\udfffb", 5, None):
        with pytest.raises(InvalidInput, match="^prompt:"):
            checks.text(bad, "prompt")


def test_stop_strings_are_bounded() -> None:
    assert checks.stop_strings(["a", "", "bc"]) == ("a", "bc")
    assert checks.stop_strings("x") == ("x",)
    for bad in (["a"] * (checks.MAX_STOP_STRINGS + 1), ["z" * (checks.MAX_STOP_CHARS + 1)],
                [1], {"a": 1}, ["\ud800"]):
        with pytest.raises(InvalidInput, match="^stop:"):
            checks.stop_strings(bad)


@pytest.mark.parametrize("field", ["logprobs", "top_logprobs", "echo", "best_of", "n"])
def test_unsupported_fields_are_refused_but_their_defaults_pass(field: str) -> None:
    checks.refuse_unsupported({"logprobs": None, "top_logprobs": 0, "echo": False,
                               "best_of": 1, "n": 1})
    with pytest.raises(InvalidInput, match=f"^{field}: .* not supported"):
        checks.refuse_unsupported({field: 2})


def test_a_tiny_temperature_is_greedy_and_a_huge_one_samples() -> None:
    tiny = parse_openai({"prompt": "hi", "temperature": 1e-45}, False, 512)
    assert tiny.params.temperature == 0.0
    huge = parse_openai({"prompt": "hi", "temperature": 1e308, "seed": -(2**63)}, False, 512)
    assert huge.params.temperature == 1e308 and huge.params.seed == -(2**63)


def test_prompt_length_is_checked_before_tokenising() -> None:
    with pytest.raises(InvalidInput, match="^prompt: at least 600"):
        parse_openai({"prompt": "x" * 599}, False, 512)
    with pytest.raises(InvalidInput, match="^prompt: at least 1000"):
        parse_openai({"prompt": [65] * 1000}, False, 512)
    with pytest.raises(InvalidInput, match="^messages"):
        parse_openai({"messages": [{"role": "user", "content": "x" * 600}]}, True, 512)
    with pytest.raises(InvalidInput, match="^text_input: at least"):
        parse_generate({"text_input": "x" * 600}, False, 512)
