"""Validate request bodies against the official `openai` package's own request types.

Run by the virtualenv's python that has `openai` (and so pydantic): reads JSON lines
`{"endpoint": "chat" | "completions", "body": {...}}` on stdin and prints, per line, `ok` or
the validation error on one line. Imports nothing of loadgen.
"""

from __future__ import annotations

import json
import sys

from openai.types import completion_create_params as completions
from openai.types.chat import completion_create_params as chat
from pydantic import TypeAdapter, ValidationError

ADAPTERS = {"chat": TypeAdapter(chat.CompletionCreateParamsStreaming),
            "completions": TypeAdapter(completions.CompletionCreateParamsStreaming)}

for line in sys.stdin:
    item = json.loads(line)
    try:
        ADAPTERS[item["endpoint"]].validate_python(item["body"], strict=True)
        print("ok")
    except ValidationError as exc:
        print(" ".join(str(exc).split()))
