"""The Open Inference Protocol / Triton `generate_stream` extension, streamed over SSE.

    generate://HOST[:PORT]/MODEL[?key=value&...]   (generates:// for TLS; port 80/443 by default)

POST /v2/models/MODEL[/versions/V]/generate_stream with `{"text_input": ..., "parameters":
{"stream": true, "max_tokens": N, ...}}`; each SSE event is a JSON object whose `text_output`
is the text of that step (a chunk with non-empty text carries tokens), or `{"error": ...}`
(an in-band failure: Triton sets the status before inference ends). The extension reports no
token usage, so counts are the client's (`tokenizer=`). Options, besides `streaming.KEYS`:

    version=V              model version (default: the server's choice)
    max_tokens_at=parameters   where `max_tokens` goes: parameters, or top (a top-level
                           field, as TensorRT-LLM ensembles take it as an input)

A fixed output length (with `ignore_eos=1`) adds `ignore_eos` and `min_tokens` beside
`max_tokens`. `extra=` fields go into `parameters`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.adapters.history import Exchanged, transcript
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
from loadgen.errors import SutSpecError

__all__ = ["GENERATE_KEYS", "GenerateSut"]

GENERATE_KEYS = (*KEYS, "version", "max_tokens_at")
SCHEMES = {"generate": (80, False), "generates": (443, True)}
PLACES = ("parameters", "top")


class GenerateSut(StreamingSut):
    """A streaming `SystemUnderTest` for the OIP `generate_stream` extension."""

    protocol = "oip-generate"

    def __init__(self, endpoint: Endpoint) -> None:
        super().__init__(endpoint)
        self.version = endpoint.options.get("version", "")
        self.max_tokens_at = endpoint.options.get("max_tokens_at", "parameters")
        if self.max_tokens_at not in PLACES:
            raise SutSpecError(f"{endpoint.url}: max_tokens_at={self.max_tokens_at!r}: expected "
                               "parameters or top")

    @classmethod
    def from_spec(cls, spec: str) -> GenerateSut:
        """Build from `generate[s]://HOST[:PORT]/MODEL?key=value&...`."""
        return cls(Endpoint.parse(spec, SCHEMES, GENERATE_KEYS))

    @property
    def path(self) -> str:
        """`/v2/models/MODEL[/versions/V]/generate_stream`."""
        version = f"/versions/{self.version}" if self.version else ""
        return f"/v2/models/{self.endpoint.model}{version}/generate_stream"

    def body(self, prompt: Prompt, history: Sequence[Exchanged] = ()) -> dict[str, Any]:
        """`text_input` (after a session's earlier turns, concatenated) and the parameters:
        streamed, `max_tokens`, the extras."""
        lengths: dict[str, Any] = {"max_tokens": prompt.max_tokens}
        if prompt.fixed_output and self.ignore_eos:
            lengths |= {"ignore_eos": True, "min_tokens": prompt.max_tokens}
        parameters: dict[str, Any] = {"stream": True}
        body: dict[str, Any] = {"text_input": transcript(history, prompt)}
        if self.max_tokens_at == "top":
            body |= lengths
        else:
            parameters |= lengths
        body["parameters"] = parameters | dict(prompt.extra) | dict(self.extra)
        return body

    def describe(self) -> dict[str, Any]:
        """The frame's description, with the version and where `max_tokens` goes."""
        return super().describe() | {"version": self.version,
                                     "max_tokens_at": self.max_tokens_at}

    def has_text(self, doc: Mapping[str, Any]) -> bool:
        """A step with non-empty `text_output`."""
        text = doc.get("text_output")
        return isinstance(text, str) and bool(text)

    def read(self, exchange: Exchange, payload: bytes, now_ns: int) -> None:
        """One event: an in-band error, or a step's `text_output`."""
        doc = decode(payload)
        error = doc.get("error")
        if error is not None:
            raise StreamError("stream_error", error_message(error))
        reason = doc.get("finish_reason")
        if isinstance(reason, str):
            exchange.stream.finish_reason = reason
        text = doc.get("text_output")
        if isinstance(text, str) and text:
            tokens = self.counter.count_text(text)
            exchange.add(now_ns, tokens, tokens, True)
            if exchange.answer is not None:
                exchange.answer.append(text)
            if reason is None:
                learn(exchange, payload, text, True)
