"""The OpenAI-compatible and OIP `generate` wire formats: requests in, JSON bodies out (pure).

Requests honour, besides OpenAI's fields (`model`, `prompt` or `messages`, `max_tokens` /
`max_completion_tokens`, `temperature` (default 1.0), `top_p`, `seed`, `stop`, `stream`,
`stream_options.include_usage`), vLLM's extras `top_k`, `ignore_eos`, `min_tokens`,
`priority` and `stream_options.continuous_usage_stats`; `n` must be 1. OIP `generate` takes
`text_input` and the same knobs under `parameters`. A malformed request raises
`InvalidInput` with a message naming the field.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sut.errors import InvalidInput
from sut.llm.sequence import Delta, RequestTimings, SamplingParams
from sut.llm.tokenizer import chat_prompt, encode

__all__ = ["Generation", "WireFormat", "parse_generate", "parse_openai", "usage"]


@dataclass(frozen=True, slots=True)
class Generation:
    """A parsed request: what to run and how to answer it."""

    prompt: list[int]
    params: SamplingParams
    priority: int
    stream: bool
    include_usage: bool
    continuous_usage: bool


def _number(body: Mapping[str, Any], key: str, default: float, kind: type = float) -> Any:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or (kind is int and not float(value).is_integer()):
        raise InvalidInput(f"{key}: want a {'integer' if kind is int else 'number'},"
                           f" got {value!r}")
    return kind(value)


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,) if value else ()
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return tuple(s for s in value if s)
    raise InvalidInput(f"stop: want a string or a list of strings, got {value!r}")


def _params(body: Mapping[str, Any], max_tokens: int) -> tuple[SamplingParams, int]:
    top_k = _number(body, "top_k", 0, int)
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise InvalidInput(f"seed: want an integer, got {seed!r}")
    for flag in ("ignore_eos", "stream"):
        if not isinstance(body.get(flag, False), bool):
            raise InvalidInput(f"{flag}: want true or false")
    params = SamplingParams(
        max_tokens=max_tokens, temperature=_number(body, "temperature", 1.0),
        top_p=_number(body, "top_p", 1.0), top_k=max(0, top_k), seed=seed,
        stop=_stop(body.get("stop")), ignore_eos=bool(body.get("ignore_eos", False)),
        min_tokens=_number(body, "min_tokens", 0, int))
    return params, _number(body, "priority", 0, int)


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        return "".join(str(p.get("text", "")) for p in content if p.get("type") == "text")
    raise InvalidInput("messages: content must be a string or a list of text parts")


def parse_openai(body: Any, chat: bool, max_model_len: int) -> Generation:
    """A `/v1/completions` (chat False) or `/v1/chat/completions` body."""
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    if body.get("n", 1) != 1:
        raise InvalidInput("n: only 1 is supported")
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages):
            raise InvalidInput("messages: want a non-empty list of {role, content}")
        prompt = encode(chat_prompt([{"role": m["role"],
                                      "content": _message_text(m.get("content", ""))}
                                     for m in messages]))
    else:
        raw = body.get("prompt")
        if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
            raw = raw[0]
        if isinstance(raw, str):
            prompt = encode(raw)
        elif isinstance(raw, list) and raw and all(
                isinstance(t, int) and not isinstance(t, bool) for t in raw):
            prompt = list(raw)
        else:
            raise InvalidInput("prompt: want a string or a list of token ids")
    key = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    default = max(1, max_model_len - len(prompt)) if chat else 16
    max_tokens = _number(body, key, default, int)
    params, priority = _params(body, max_tokens)
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise InvalidInput("stream_options: want an object")
    return Generation(prompt, params, priority, bool(body.get("stream", False)),
                      bool(options.get("include_usage", False)),
                      bool(options.get("continuous_usage_stats", False)))


def parse_generate(body: Any, stream: bool) -> Generation:
    """An OIP `generate` / `generate_stream` body: `text_input` and `parameters`."""
    if not isinstance(body, dict) or not isinstance(body.get("text_input"), str):
        raise InvalidInput('want a JSON object with a string "text_input"')
    parameters = body.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidInput("parameters: want an object")
    params, priority = _params(
        {"temperature": 0.0, **parameters}, _number(parameters, "max_tokens", 16, int))
    return Generation(encode(body["text_input"]), params, priority, stream, True, True)


def usage(delta: Delta) -> dict[str, Any]:
    """OpenAI's usage object of `delta`, with `prompt_tokens_details.cached_tokens` (the
    prompt tokens the prefix cache served), as vLLM and OpenAI report it."""
    return {"prompt_tokens": delta.prompt_tokens, "completion_tokens": delta.output_tokens,
            "total_tokens": delta.prompt_tokens + delta.output_tokens,
            "prompt_tokens_details": {"cached_tokens": delta.cached_tokens}}


class WireFormat:
    """Builds the bodies of one request's answer: completions, chat or OIP generate."""

    def __init__(self, kind: str, model: str, request_id: str) -> None:
        self.kind, self.model, self.id = kind, model, request_id
        self.created = int(time.time())

    def _envelope(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def role_chunk(self) -> dict[str, Any]:
        """Chat's first chunk: the assistant role, no content."""
        return {**self._envelope("chat.completion.chunk"), "choices": [{
            "index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
            "finish_reason": None}]}

    def chunk(self, delta: Delta, continuous_usage: bool) -> dict[str, Any]:
        """A streamed chunk of `delta` (the last one carries `finish_reason` and timings)."""
        if self.kind == "generate":
            out: dict[str, Any] = {"model_name": self.model, "model_version": "1",
                                   "text_output": delta.text, "output_tokens": delta.new_tokens}
            if delta.finished:
                out["finish_reason"] = delta.finish_reason
        elif self.kind == "chat":
            out = {**self._envelope("chat.completion.chunk"), "choices": [{
                "index": 0, "delta": {"content": delta.text}, "logprobs": None,
                "finish_reason": delta.finish_reason}]}
        else:
            out = {**self._envelope("text_completion"), "choices": [{
                "index": 0, "text": delta.text, "logprobs": None,
                "finish_reason": delta.finish_reason}]}
        if continuous_usage:
            out["usage"] = usage(delta)
        if delta.timings is not None:
            out["timings"] = delta.timings.as_dict()
        return out

    def usage_chunk(self, delta: Delta) -> dict[str, Any]:
        """The closing usage chunk (`include_usage`): no choices."""
        obj = "chat.completion.chunk" if self.kind == "chat" else "text_completion"
        return {**self._envelope(obj), "choices": [],
                "usage": usage(delta)}

    def whole(self, text: str, last: Delta) -> dict[str, Any]:
        """A non-streamed answer with usage and the server's timings."""
        timings: RequestTimings | None = last.timings
        extra = {"usage": usage(last),
                 "timings": timings.as_dict() if timings else {}}
        if self.kind == "generate":
            return {"model_name": self.model, "model_version": "1", "text_output": text,
                    "finish_reason": last.finish_reason, **extra}
        if self.kind == "chat":
            return {**self._envelope("chat.completion"), "choices": [{
                "index": 0, "message": {"role": "assistant", "content": text},
                "logprobs": None, "finish_reason": last.finish_reason}], **extra}
        return {**self._envelope("text_completion"), "choices": [{
            "index": 0, "text": text, "logprobs": None,
            "finish_reason": last.finish_reason}], **extra}
