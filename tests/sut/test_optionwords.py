"""The one parser of `key=value` option words: each value type, and an unknown key named with
the closest known one, for the service options and the LLM engine's knobs alike."""

from __future__ import annotations

import pytest

from sut.errors import ConfigError
from sut.llm.config import parse_engine_options
from sut.optionwords import at_least, auto_flag, flag, integer, number, parse_words, word


def test_each_value_type_and_its_error() -> None:
    assert (integer("k", "7"), at_least(1)("k", "3"), number("k", "0.5")) == (7, 3, 0.5)
    assert [flag("k", w) for w in ("On", "yes", "0", "false")] == [True, True, False, False]
    assert word("k", " CUDA ") == "cuda"
    assert [auto_flag("k", w) for w in (" Auto", "on", "no")] == [None, True, False]
    for parse, raw, says in [(integer, "x", "want an integer"),
                             (at_least(2), "1", "must be >= 2"),
                             (number, "fast", "want a number"),
                             (flag, "maybe", "want true or false"),
                             (auto_flag, "maybe", "want true or false"),
                             (word, " ", "must not be empty")]:
        with pytest.raises(ConfigError, match=f"^k: {says}"):
            parse("k", raw)


def test_an_unknown_key_names_the_closest_known_one() -> None:
    parsers = {"max_num_seqs": integer, "seed": integer}
    assert parse_words({"seed": "3"}, parsers, "option") == {"seed": 3}
    with pytest.raises(ConfigError, match="unknown option; did you mean max_num_seqs"):
        parse_words({"max_num_seq": "3"}, parsers, "option")
    with pytest.raises(ConfigError, match="unknown engine option; did you mean block_size"):
        parse_engine_options({"blok_size": "8"})
