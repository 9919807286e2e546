"""OpenAI-compatible streaming: `/v1/chat/completions` and `/v1/completions` over SSE.

    openai://HOST[:PORT]/MODEL[?key=value&...]     (openais:// for TLS; port 80/443 by default)

Options (query-string keys; an unknown key is a SutSpecError naming it), besides those of
`streaming.KEYS` (see the README):

    endpoint=chat          chat (messages) or completions (prompt)
    base=/v1               the API's path prefix
    continuous_usage=0     1: also ask `stream_options.continuous_usage_stats` (vLLM), which
                           gives the cumulative token count in every chunk

Every request asks `stream: true` and `stream_options.include_usage`, `max_tokens` from the
prompt, and, for a fixed output length (with `ignore_eos=1`, the default), `ignore_eos` and
`min_tokens` as vLLM and SGLang take them. A chunk carries tokens when its choices carry
text: `delta.content`, `delta.reasoning_content` or `delta.reasoning` (chat; reasoning
counts toward TTFT, not TTFO), `text` (completions). A role-only first chunk, an empty
content, a usage chunk (choices `[]`, `null` or missing) and `[DONE]` carry none. `usage`
gives the server's counts (with `prompt_tokens_details.cached_tokens` and
`completion_tokens_details.reasoning_tokens` where sent); with continuous usage a chunk's tokens are the growth of
`completion_tokens` since the last chunk with text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.adapters.history import Exchanged, transcript
from loadgen.adapters.preflight import served_models
from loadgen.adapters.streaming import (
    KEYS,
    Exchange,
    StreamError,
    StreamingSut,
    decode,
    error_message,
    learn,
)
from loadgen.adapters.tokens import Prompt
from loadgen.adapters.wire.endpoint import Endpoint
from loadgen.errors import SutError, SutSpecError, suggest

__all__ = ["OPENAI_KEYS", "OpenAISut"]

OPENAI_KEYS = (*KEYS, "endpoint", "base", "continuous_usage")
SCHEMES = {"openai": (80, False), "openais": (443, True)}
ENDPOINTS = ("chat", "completions")


class OpenAISut(StreamingSut):
    """A streaming `SystemUnderTest` for an OpenAI-compatible server."""

    end_marker = True

    def __init__(self, endpoint: Endpoint) -> None:
        super().__init__(endpoint)
        self.endpoint_kind = endpoint.options.get("endpoint", "chat")
        if self.endpoint_kind not in ENDPOINTS:
            raise SutSpecError(f"{endpoint.url}: endpoint={self.endpoint_kind!r}: expected chat "
                               "or completions")
        self.chat = self.endpoint_kind == "chat"
        self.protocol = f"openai-{self.endpoint_kind}"
        self.base = "/" + endpoint.options.get("base", "/v1").strip("/")
        self.continuous_usage = endpoint.flag("continuous_usage")
        self._served: list[str] | None = None

    @classmethod
    def from_spec(cls, spec: str) -> OpenAISut:
        """Build from `openai[s]://HOST[:PORT]/MODEL?key=value&...`."""
        return cls(Endpoint.parse(spec, SCHEMES, OPENAI_KEYS))

    @property
    def path(self) -> str:
        """`/v1/chat/completions` or `/v1/completions` (under `base`)."""
        return f"{self.base}/chat/completions" if self.chat else f"{self.base}/completions"

    def body(self, prompt: Prompt, history: Sequence[Exchanged] = ()) -> dict[str, Any]:
        """The request of one prompt: streamed, usage asked, the workload's and spec's extras;
        after a session's earlier turns (chat: their messages and answers; completions: their
        text concatenated)."""
        options: dict[str, Any] = {"include_usage": True}
        if self.continuous_usage:
            options["continuous_usage_stats"] = True
        body: dict[str, Any] = {"model": self.endpoint.model}
        if self.chat:
            body["messages"] = [*(m for e in history for m in (
                {"role": "user", "content": e.prompt.text},
                {"role": "assistant", "content": e.answer})),
                {"role": "user", "content": prompt.text}]
        else:
            body["prompt"] = transcript(history, prompt)
        body |= {"max_tokens": prompt.max_tokens, "stream": True, "stream_options": options}
        if prompt.fixed_output and self.ignore_eos:
            body |= {"ignore_eos": True, "min_tokens": prompt.max_tokens}
        return body | dict(prompt.extra) | dict(self.extra)

    def describe(self) -> dict[str, Any]:
        """The frame's description, with the endpoint kind and usage options."""
        return super().describe() | {"base": self.base, "continuous_usage": self.continuous_usage}

    async def preflight(self) -> None:
        """The model must be among those `GET {base}/models` lists (when the server has the
        route), then one short request must stream text."""
        if not self.check_first:
            return
        served = await served_models(self.endpoint, f"{self.base}/models", self.headers, self.ssl)
        self._served = served
        if served is not None and self.endpoint.model not in served:
            e = self.endpoint
            raise SutError(
                f"{e.url}: model {e.model!r} is not served here; {e.address} serves "
                f"{', '.join(map(repr, served)) or 'no model'}{suggest(e.model, served)}"
                + (f" (try {e.scheme}://{e.address}/{served[0]})" if served else ""))
        await super().preflight()

    async def preflight_hint(self) -> str:
        """The served models, when the server listed them."""
        return f" (served models: {', '.join(self._served)})" if self._served else ""

    def has_text(self, doc: Mapping[str, Any]) -> bool:
        """A chunk whose choices carry answer or reasoning text."""
        answer, reasoning, _ = _texts(doc.get("choices"), self.chat)
        return bool(answer or reasoning)

    def read(self, exchange: Exchange, payload: bytes, now_ns: int) -> None:
        """One event: `[DONE]`, an in-band error, a chunk with text and/or usage."""
        if payload == b"[DONE]":
            exchange.done_marker = True
            return
        doc = decode(payload)
        error = doc.get("error")
        if error is not None:
            raise StreamError("stream_error", error_message(error))
        stream = exchange.stream
        answer, reasoning, finish = _texts(doc.get("choices"), self.chat)
        if finish is not None:
            stream.finish_reason = finish
        usage = doc.get("usage")
        out = usage.get("completion_tokens") if isinstance(usage, dict) else None
        if answer or reasoning:
            count = self.counter.count_text
            client = (count(answer) if answer else 0) + (count(reasoning) if reasoning else 0)
            tokens = client
            if isinstance(out, int):
                if out > exchange.usage_out:
                    tokens = out - exchange.usage_out
                exchange.usage_out = out
            exchange.add(now_ns, tokens, client, bool(answer))
            if answer and exchange.answer is not None:
                exchange.answer.append(answer)
            if out is None and finish is None and not (answer and reasoning) \
                    and len(doc.get("choices") or ()) == 1:
                learn(exchange, payload, answer or reasoning, bool(answer))
        if isinstance(usage, dict):
            if isinstance(out, int):
                stream.server_output_tokens = out
            prompt_tokens = usage.get("prompt_tokens")
            if isinstance(prompt_tokens, int):
                stream.input_tokens = prompt_tokens
            cached = _detail(usage, "prompt_tokens_details", "cached_tokens")
            if cached is not None:
                stream.cached_tokens = cached
            thought = _detail(usage, "completion_tokens_details", "reasoning_tokens")
            if thought is not None:
                stream.reasoning_tokens = thought


def _detail(usage: dict[str, Any], block: str, key: str) -> int | None:
    """`usage[block][key]` when it is a count (vLLM, SGLang and OpenAI send null or omit it
    when they do not know)."""
    details = usage.get(block)
    value = details.get(key) if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 \
        else None


def _texts(choices: Any, chat: bool) -> tuple[str, str, str | None]:
    """(answer text, reasoning text, finish_reason) of a chunk's choices."""
    answer = reasoning = ""
    finish = None
    if not isinstance(choices, list):
        return answer, reasoning, finish
    for choice in choices:
        if not isinstance(choice, dict):
            continue
        if chat:
            delta = choice.get("delta")
            if isinstance(delta, dict):
                content = delta.get("content")
                if isinstance(content, str):
                    answer += content
                thought = delta.get("reasoning_content") or delta.get("reasoning")
                if isinstance(thought, str):
                    reasoning += thought
        else:
            text = choice.get("text")
            if isinstance(text, str):
                answer += text
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            finish = reason
    return answer, reasoning, finish
