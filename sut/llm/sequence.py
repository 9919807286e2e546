"""One request's life in the engine: what was asked, its tokens, its text, its stop rules.

A `Sequence` holds prompt and output tokens, how many of them have K/V in the cache
(`computed`), its blocks, and its timings. Text is decoded as tokens come; with stop strings
the last `len(longest stop) - 1` characters are held back until they cannot start one.
Every `stream_interval` tokens (and at the end) the engine hands a `Delta` to the request's
callback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from sut.llm.tokenizer import EOS, Detokenizer

__all__ = ["Delta", "RequestTimings", "SamplingParams", "Sequence"]


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to pick and when to stop; temperature 0 is greedy."""

    max_tokens: int = 16
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RequestTimings:
    """When a request arrived, was first scheduled, gave its first token, finished (ns of
    `perf_counter_ns`), with its token counts."""

    arrival_ns: int
    scheduled_ns: int
    first_token_ns: int
    finished_ns: int
    prompt_tokens: int
    output_tokens: int
    cached_tokens: int
    preemptions: int

    @property
    def queue_ns(self) -> int:
        """Arrival to first scheduled."""
        return max(0, self.scheduled_ns - self.arrival_ns)

    @property
    def prefill_ns(self) -> int:
        """First scheduled to first token."""
        return max(0, self.first_token_ns - self.scheduled_ns)

    @property
    def decode_ns(self) -> int:
        """First token to finish."""
        return max(0, self.finished_ns - self.first_token_ns)

    def as_dict(self) -> dict[str, int]:
        """The timings a response reports: durations in ns and the token counts."""
        return {"queue_ns": self.queue_ns, "prefill_ns": self.prefill_ns,
                "decode_ns": self.decode_ns, "e2e_ns": self.finished_ns - self.arrival_ns,
                "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens,
                "cached_tokens": self.cached_tokens, "preemptions": self.preemptions}


@dataclass(frozen=True, slots=True)
class Delta:
    """What a request produced since its last delta; `timings` is set on the last one."""

    request_id: int
    text: str
    new_tokens: int
    prompt_tokens: int
    output_tokens: int
    emit_ns: int
    finish_reason: str | None = None
    error: str | None = None
    timings: RequestTimings | None = None
    cached_tokens: int = 0  # prompt tokens served from the prefix cache

    @property
    def finished(self) -> bool:
        """The request is over (finished, cancelled or failed)."""
        return self.finish_reason is not None


@dataclass(slots=True, eq=False)
class Sequence:
    """A request inside the engine."""

    request_id: int
    prompt: list[int]
    params: SamplingParams
    on_output: Callable[[Delta], None]
    arrival_ns: int
    priority: int = 0
    output: list[int] = field(default_factory=list)
    computed: int = 0
    blocks: list[int] = field(default_factory=list)
    block_hashes: list[bytes] = field(default_factory=list)
    scheduled_ns: int = 0
    first_token_ns: int = 0
    token_ns: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    preemptions: int = 0
    finish_reason: str | None = None
    text: str = ""
    _sent_chars: int = 0
    _sent_tokens: int = 0
    _detok: Detokenizer = field(default_factory=Detokenizer)
    _stop_reach: int = 0  # the longest stop string's length, measured once

    def __post_init__(self) -> None:
        self._stop_reach = max((len(s) for s in self.params.stop), default=0)

    @property
    def num_tokens(self) -> int:
        """Prompt and output tokens."""
        return len(self.prompt) + len(self.output)

    def token_at(self, start: int, stop: int) -> list[int]:
        """Tokens `start:stop` of prompt + output."""
        split = len(self.prompt)
        if stop <= split:
            return self.prompt[start:stop]
        return (self.prompt[start:] if start < split else []) + \
            self.output[max(0, start - split):stop - split]

    def eos_allowed(self) -> bool:
        """EOS may be sampled: it would end the sequence (min_tokens reached, EOS not ignored)."""
        return len(self.output) >= self.params.min_tokens and not self.params.ignore_eos

    def append(self, token: int, now_ns: int, max_model_len: int) -> None:
        """Add a sampled token; set `finish_reason` when a stop rule fires."""
        params = self.params
        self.output.append(token)
        self.token_ns.append(now_ns)
        if not self.first_token_ns:
            self.first_token_ns = now_ns
        before = len(self.text)
        self.text += self._detok.push(token)
        counted = len(self.output) >= params.min_tokens
        eos = token == EOS  # sampled only where it ends the sequence
        if counted and (eos or (params.stop and self._cut_at_stop(before))):
            self.finish_reason = "stop"
        elif len(self.output) >= params.max_tokens or self.num_tokens >= max_model_len:
            self.finish_reason = "length"

    def _cut_at_stop(self, before: int) -> bool:
        start = max(0, before - self._stop_reach + 1)
        found = [i for i in (self.text.find(s, start) for s in self.params.stop) if i >= 0]
        if not found:
            return False
        self.text = self.text[:min(found)]
        return True

    def delta(self, now_ns: int, stream_interval: int) -> Delta | None:
        """The delta due now: at the end, or every `stream_interval` tokens."""
        new_tokens = len(self.output) - self._sent_tokens
        if self.finish_reason is None and new_tokens < stream_interval:
            return None
        if self.finish_reason is not None and self.finish_reason != "stop":
            self.text += self._detok.flush()
        end = len(self.text)
        if self.finish_reason is None and self.params.stop:
            end = max(self._sent_chars, end - self._stop_reach + 1)
        text = self.text[self._sent_chars:end]
        self._sent_chars, self._sent_tokens = end, len(self.output)
        timings = None if self.finish_reason is None else self.timings(now_ns)
        return Delta(self.request_id, text, new_tokens, len(self.prompt), len(self.output),
                     now_ns, self.finish_reason, timings=timings,
                     cached_tokens=self.cached_tokens)

    def timings(self, now_ns: int) -> RequestTimings:
        """This request's timings, finished at `now_ns`."""
        scheduled = self.scheduled_ns or now_ns
        return RequestTimings(self.arrival_ns, scheduled, self.first_token_ns or now_ns, now_ns,
                              len(self.prompt), len(self.output), self.cached_tokens,
                              self.preemptions)
