"""The endpoint probe: what a server says of itself, kept short; nothing raises."""

from __future__ import annotations

import pytest

from loadgen.adapters.httpbase import http_auth, http_base
from loadgen.record.provenance import probe_endpoint


def test_a_dead_endpoint_gives_an_empty_identity_and_no_round_trip() -> None:
    probe = probe_endpoint("http://127.0.0.1:9", rounds=2, timeout_s=0.5)  # discard port
    assert probe == {"base": "http://127.0.0.1:9", "identity": {}, "gpu": None,
                     "baseline_rtt": None}


def test_the_http_root_of_a_sut() -> None:
    assert http_base("openai://127.0.0.1:8000/m?endpoint=completions") == "http://127.0.0.1:8000"
    assert http_base("openais://h/m") == "https://h:443"
    assert http_base("generate://[::1]:9/m") == "http://[::1]:9"
    assert http_base("grpc://h:8001/m") is None and http_base("builtin:tiny-llm") is None
    assert http_base(object()) is None


def test_the_suts_own_bearer_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOKEN_FOR_TEST", "abc")
    assert http_auth("openai://h:1/m?api_key_env=TOKEN_FOR_TEST") == {
        "Authorization": "Bearer abc"}
    assert http_auth("openai://h:1/m") == {} and http_auth(object()) == {}
