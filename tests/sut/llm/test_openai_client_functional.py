"""The official `openai` Python client streams from `loadgen serve --model tiny-llm`.

The client runs in its own virtualenv (`tests.openai_venv`); the test skips, saying why,
when that cannot be made.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from sut.llm.tokenizer import chat_prompt, encode
from tests.openai_venv import openai_python
from tests.served import serve_tiny_llm

pytestmark = pytest.mark.functional

CLIENT = Path(__file__).with_name("openai_client.py")


def test_openai_client_streams_chat_and_completions_with_usage() -> None:
    python = openai_python()
    with serve_tiny_llm("--auth-token", "sesame", "--max-num-seqs", "4") as (proc, address):
        ran = subprocess.run([python, CLIENT, f"http://{address}/v1"], capture_output=True,
                             text=True, timeout=120, check=False)
        assert ran.returncode == 0, ran.stderr[-2000:]
    assert proc.returncode in (0, -signal.SIGKILL)  # a clean exit, unless it had to be killed
    seen = json.loads(ran.stdout)
    assert seen["models"] == ["tiny-llm"]
    prompt = len(encode(chat_prompt([{"role": "user", "content": "Say something"}])))
    chat = seen["chat"]
    assert chat["roles"] == ["assistant"] and chat["chunks"] == 9 and chat["finish"] == ["length"]
    assert chat["usage"] == {"prompt_tokens": prompt, "completion_tokens": 9,
                             "total_tokens": prompt + 9,
                             "prompt_tokens_details": {"cached_tokens": 0}}
    completions = seen["completions"]
    assert completions["chunks"] == 7 and completions["finish"] == ["length"]
    assert completions["usage"]["prompt_tokens"] == len(encode("Once upon a time"))
    assert completions["usage"]["completion_tokens"] == 7
    stopped = seen["stopped"]  # a stop string: finish_reason stop, the text cut before it
    assert stopped["finish"] == ["stop"]
    assert stopped["text"] == completions["text"].split(stopped["stop"])[0]
    assert len(stopped["text"]) <= stopped["usage"]["completion_tokens"] < 7
    hi = len(encode(chat_prompt([{"role": "user", "content": "Hi"}])))
    usage = seen["whole"]["usage"]
    assert seen["whole"]["role"] == "assistant" and usage["prompt_tokens"] == hi
    assert usage["completion_tokens"] == 4 and usage["total_tokens"] == hi + 4
    assert 0 <= usage["prompt_tokens_details"]["cached_tokens"] < hi  # the openai client reads it
    assert seen["not_found"] == 404
