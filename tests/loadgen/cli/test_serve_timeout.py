"""`loadgen serve`'s request bound: none for an LLM unless `--request-timeout-s` sets one
(a long generation is the work a benchmark measures), 60 s for the OIP model server."""

from __future__ import annotations

import pytest

from loadgen.cli.serve import _request_timeout
from sut.server.core import ServerConfig


def test_an_llm_has_no_request_bound_unless_one_is_given() -> None:
    assert _request_timeout(None, llm=True) is None
    assert _request_timeout(90.0, llm=True) == 90.0
    assert _request_timeout(0.0, llm=True) is None  # 0: no bound, said outright


def test_the_model_server_keeps_its_bound() -> None:
    assert _request_timeout(None, llm=False) == 60.0
    assert _request_timeout(5.0, llm=False) == 5.0
    assert _request_timeout(0.0, llm=False) is None


def test_a_config_takes_no_bound_but_refuses_a_negative_one() -> None:
    assert ServerConfig(request_timeout_s=None).request_timeout_s is None
    with pytest.raises(ValueError, match="request_timeout_s must be > 0"):
        ServerConfig(request_timeout_s=-1.0)
