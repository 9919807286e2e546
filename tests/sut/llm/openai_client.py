"""Run by the `openai` package's own virtualenv: stream chat and completions from a server.

    python openai_client.py BASE_URL  ->  one JSON line of what the client saw
"""

from __future__ import annotations

import json
import sys

import openai


def main(base_url: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="sesame", max_retries=0, timeout=60)
    seen: dict[str, object] = {"models": [m.id for m in client.models.list()]}
    chat = client.chat.completions.create(
        model="tiny-llm", messages=[{"role": "user", "content": "Say something"}],
        max_tokens=9, temperature=0, stream=True, stream_options={"include_usage": True},
        extra_body={"ignore_eos": True})
    roles, content, finish, usage = [], [], [], None
    for chunk in chat:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump(exclude_none=True)
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            elif choice.delta.content is not None:
                content.append(choice.delta.content)
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    seen["chat"] = {"roles": roles, "chunks": len(content), "text": "".join(content),
                    "finish": finish, "usage": usage}
    completion = client.completions.create(
        model="tiny-llm", prompt="Once upon a time", max_tokens=7, temperature=0, stream=True,
        stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    texts, finish, usage = [], [], None
    for chunk in completion:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump(exclude_none=True)
        for choice in chunk.choices:
            texts.append(choice.text)
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    seen["completions"] = {"chunks": len(texts), "text": "".join(texts), "finish": finish,
                           "usage": usage}
    stop = "".join(texts)[3]  # greedy: the same text again, cut before this character
    cut = client.completions.create(
        model="tiny-llm", prompt="Once upon a time", max_tokens=7, temperature=0, stop=[stop],
        stream=True, stream_options={"include_usage": True}, extra_body={"ignore_eos": True})
    texts, finish, usage = [], [], None
    for chunk in cut:
        if chunk.usage is not None:
            usage = chunk.usage.model_dump(exclude_none=True)
        for choice in chunk.choices:
            texts.append(choice.text)
            if choice.finish_reason:
                finish.append(choice.finish_reason)
    seen["stopped"] = {"stop": stop, "text": "".join(texts), "finish": finish, "usage": usage}
    whole = client.chat.completions.create(
        model="tiny-llm", messages=[{"role": "user", "content": "Hi"}], max_tokens=4,
        extra_body={"ignore_eos": True})
    seen["whole"] = {"usage": whole.usage.model_dump(exclude_none=True) if whole.usage else None,
                     "role": whole.choices[0].message.role}
    try:
        client.completions.create(model="nope", prompt="x", max_tokens=2)
    except openai.NotFoundError as exc:
        seen["not_found"] = exc.status_code
    print(json.dumps(seen))


if __name__ == "__main__":
    main(sys.argv[1])
