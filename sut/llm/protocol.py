"""The OpenAI-compatible and OIP `generate` wire formats: requests in, JSON bodies out (pure).

Requests honour, besides OpenAI's fields (`model`, `prompt` or `messages`, `max_tokens` /
`max_completion_tokens`, `temperature` (default 1.0), `top_p`, `seed`, `stop`, `stream`,
`stream_options.include_usage`), vLLM's extras `top_k`, `ignore_eos`, `min_tokens`,
`priority` and `stream_options.continuous_usage_stats`; `n` must be 1, and `logprobs`,
`top_logprobs`, `echo` and `best_of` are refused. OIP `generate` takes `text_input` and the same
knobs under `parameters`. Every field goes through `sut.llm.checks`, and a prompt's length is
checked against `max_model_len` before it is tokenised; a malformed request raises
`InvalidInput` with a message naming the field.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sut.errors import InvalidInput
from sut.llm import checks
from sut.llm.sampler import GREEDY_BELOW
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


def _params(body: Mapping[str, Any], max_tokens: int) -> tuple[SamplingParams, int]:
    temperature = checks.number(body, "temperature", 1.0, low=0.0)
    if temperature < GREEDY_BELOW:
        temperature = 0.0  # the sampler's greedy rule, shown as 0
    checks.flag(body, "stream")
    params = SamplingParams(
        max_tokens=max_tokens, temperature=temperature,
        top_p=checks.number(body, "top_p", 1.0, low=1e-9, high=1.0),
        top_k=max(0, checks.integer(body, "top_k", 0)),
        seed=checks.integer(body, "seed", 0) if body.get("seed") is not None else None,
        stop=checks.stop_strings(body.get("stop")), ignore_eos=checks.flag(body, "ignore_eos"),
        min_tokens=checks.integer(body, "min_tokens", 0, low=0, high=max_tokens))
    return params, checks.integer(body, "priority", 0)


def _max_tokens(body: Mapping[str, Any], key: str, default: int) -> int:
    return checks.integer(body, key, default, low=1)


def _encode(value: Any, field: str, max_model_len: int) -> list[int]:
    """`value`'s tokens; its length is checked first (a character is at least one token)."""
    if isinstance(value, str):
        _check_length(len(value) + 1, field, max_model_len)
    return encode(checks.text(value, field))


def _check_length(at_least: int, field: str, max_model_len: int) -> None:
    if at_least >= max_model_len:
        raise InvalidInput(f"{field}: at least {at_least} tokens; this model takes at most"
                           f" {max_model_len - 1} (max_model_len {max_model_len})")


def _message(message: Any, index: int, max_model_len: int) -> dict[str, str]:
    if not isinstance(message, dict):
        raise InvalidInput(f"messages[{index}]: want an object {{role, content}}")
    name = f"messages[{index}]"
    content = message.get("content")
    if isinstance(content, list) and all(isinstance(p, dict) for p in content):
        content = "".join(checks.text(p.get("text", ""), f"{name}.content.text")
                          for p in content if p.get("type") == "text")
    return {"role": _bounded_text(message.get("role"), f"{name}.role", max_model_len),
            "content": _bounded_text("" if content is None else content, f"{name}.content",
                                     max_model_len)}


def _bounded_text(value: Any, field: str, max_model_len: int) -> str:
    """`value` as text, its length checked before it is encoded."""
    if isinstance(value, str):
        _check_length(len(value), field, max_model_len)
    return checks.text(value, field)


def _chat_prompt(raw: Any, max_model_len: int) -> list[int]:
    if not isinstance(raw, list) or not raw:
        raise InvalidInput("messages: want a non-empty list of {role, content}")
    _check_length(len(raw), "messages", max_model_len)
    messages = [_message(m, i, max_model_len) for i, m in enumerate(raw)]
    rendered = chat_prompt(messages)
    _check_length(len(rendered) + 1, "messages", max_model_len)
    return encode(rendered)


def _prompt(raw: Any, max_model_len: int) -> list[int]:
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
        raw = raw[0]
    if isinstance(raw, str):
        return _encode(raw, "prompt", max_model_len)
    if isinstance(raw, list) and raw:
        _check_length(len(raw), "prompt", max_model_len)
        if all(isinstance(t, int) and not isinstance(t, bool) for t in raw):
            return list(raw)
    raise InvalidInput("prompt: want a string or a list of token ids")


def parse_openai(body: Any, chat: bool, max_model_len: int) -> Generation:
    """A `/v1/completions` (chat False) or `/v1/chat/completions` body."""
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object")
    checks.refuse_unsupported(body)
    if chat:
        prompt = _chat_prompt(body.get("messages"), max_model_len)
    else:
        prompt = _prompt(body.get("prompt"), max_model_len)
    key = "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens"
    default = max(1, max_model_len - len(prompt)) if chat else 16
    params, priority = _params(body, _max_tokens(body, key, default))
    options = body.get("stream_options") or {}
    if not isinstance(options, dict):
        raise InvalidInput("stream_options: want an object")
    return Generation(prompt, params, priority, checks.flag(body, "stream"),
                      checks.flag(options, "include_usage"),
                      checks.flag(options, "continuous_usage_stats"))


def parse_generate(body: Any, stream: bool, max_model_len: int) -> Generation:
    """An OIP `generate` / `generate_stream` body: `text_input` and `parameters`."""
    if not isinstance(body, dict) or not isinstance(body.get("text_input"), str):
        raise InvalidInput('want a JSON object with a string "text_input"')
    parameters = body.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise InvalidInput("parameters: want an object")
    prompt = _encode(body["text_input"], "text_input", max_model_len)
    params, priority = _params(
        {"temperature": 0.0, **parameters}, _max_tokens(parameters, "max_tokens", 16))
    return Generation(prompt, params, priority, stream, True, True)


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
