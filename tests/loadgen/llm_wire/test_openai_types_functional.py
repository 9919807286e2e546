"""Our openai:// request bodies validate against the official `openai` package's request
types (pydantic, strict; `messages`, typed as an Iterable, is not looked into), chat and
completions, with and without a fixed output length and
continuous usage; a malformed body is rejected, so the check can fail.

The package runs in its own virtualenv (`tests.openai_venv`, shared with `tests/sut/llm`);
the test skips, saying why, when that cannot be made.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from loadgen.adapters.openai import OpenAISut
from loadgen.adapters.tokens import Prompt
from tests.openai_venv import openai_python

pytestmark = pytest.mark.functional

CHECK = Path(__file__).with_name("openai_types.py")


def _verdicts(items: list[dict[str, Any]]) -> list[str]:
    ran = subprocess.run([openai_python(), CHECK], input="".join(
        json.dumps(item) + "\n" for item in items), capture_output=True, text=True, timeout=120,
        check=True)
    return ran.stdout.splitlines()


def test_our_request_bodies_are_valid_openai_requests() -> None:
    items = []
    for endpoint in ("chat", "completions"):
        for options in ("", "&continuous_usage=1&extra=%7B%22temperature%22%3A0.5%7D"):
            sut = OpenAISut.from_spec(f"openai://h:1/m?endpoint={endpoint}{options}")
            for prompt in (Prompt("Tell me a story", 4, 64),
                           Prompt("x", 1, 8, fixed_output=True)):
                items.append({"endpoint": endpoint, "body": sut.body(prompt)})
    assert _verdicts(items) == ["ok"] * len(items)


def test_a_malformed_body_is_rejected() -> None:
    body = OpenAISut.from_spec("openai://h:1/m").body(Prompt("q", 1, 8))
    body["stream_options"] = {"include_usage": "yes"}
    body["max_tokens"] = "eight"
    (verdict,) = _verdicts([{"endpoint": "chat", "body": body}])
    assert verdict.startswith("2 validation errors") and "stream_options.include_usage" in verdict
    assert "max_tokens" in verdict
