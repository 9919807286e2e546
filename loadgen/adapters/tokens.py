"""The seam for token streams: what a streaming SUT reports and what it is asked.

A SUT that streams tokens (an OpenAI-compatible endpoint, OIP `generate_stream`,
the built-in LLM engine, `llmsim:`) is a `SystemUnderTest` that also:

* takes its prompts from the run: the session calls `use_prompts(prompts)`
  once, before `start`, when the plan has a token workload; `issue` then maps
  each sample index to `prompts.prompt(index)`;
* reports a finished stream with `sink.streamed(query_id, done_ns, stream)`
  instead of `sink.done`, and a stream that failed part-way with
  `sink.failed(query_id, done_ns, kind, detail, stream=partial)` so the timings
  it had are kept (the failure still counts as an error);
* in a query of several samples (Offline), reports each sample's stream with
  `sink.sample_streamed(query_id, stream)` and ends the query with `sink.done`;
* for multi-turn sessions (`turns`), also takes `issue_turn(query_id, sample, turn)`:
  the turn's new message is `prompts.prompt(sample)`, sent after the session's history
  (the SUT keeps it: its earlier prompts and answers, `adapters.history`), and the
  stream's `turn` is set to `turn.index`; the history is dropped after the last turn
  or a failed one (the session ends there).

Every stamp is `time.perf_counter_ns()` taken at the socket read (or the
engine's emit) that delivered the bytes, before any parsing. Latencies are
derived by the collector, never by the adapter, so one timing model holds for
every SUT: TTFT = first chunk of any kind - scheduled; TTFO = first answer
chunk - scheduled; E2E = last token chunk - scheduled (a usage-only chunk or
`[DONE]` does not extend it); ITL = every gap between tokens, a chunk of k
tokens counting its gap once and k-1 zero gaps; TPOT = (E2E - TTFT)/(N - 1).

`Prompt` and `PromptSource` are defined in `plan.prompts` (the plan builds the
prompts) and re-exported here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from loadgen.plan.prompts import Prompt, PromptSource, Turn

__all__ = ["Prompt", "PromptSource", "StreamSink", "TokenStream", "Turn"]


@dataclass(slots=True)
class TokenStream:
    """One streamed answer as it arrived: a stamp and a token count per chunk."""

    chunk_ns: list[int] = field(default_factory=list)
    """Read stamp of each chunk that carried output tokens (reasoning or answer)."""
    chunk_tokens: list[int] = field(default_factory=list)
    """Output tokens in each chunk: the server's per-chunk usage where it gives one,
    else the client's count."""
    first_answer: int | None = None
    """Index in `chunk_ns` of the first chunk carrying answer (not reasoning) tokens."""
    client_tokens: int = 0
    """Output tokens counted by the client (its own tokenizer), for the cross-check."""
    server_output_tokens: int | None = None
    """`usage.completion_tokens` as the server reported it; None when it did not."""
    input_tokens: int | None = None
    """`usage.prompt_tokens` as the server reported it; the HTTP adapters fill in the
    prompt's own count (the workload's) when it reports none."""
    cached_tokens: int | None = None
    """`usage.prompt_tokens_details.cached_tokens`: prompt tokens the server's prefix cache
    served; None when it did not say."""
    reasoning_tokens: int | None = None
    """`usage.completion_tokens_details.reasoning_tokens`; None when the server did not say."""
    finish_reason: str | None = None
    turn: int = 0
    """Its turn in a multi-turn session (1, 2, ...); 0 for a single request."""
    sent_ns: int | None = None
    """When the request went on the wire, where the SUT waited for a free connection first
    (`max_in_flight`); None when it was sent as it was issued."""

    def add(self, stamp_ns: int, tokens: int, *, answer: bool = True) -> None:
        """Record one chunk of `tokens` output tokens read at `stamp_ns`."""
        if answer and self.first_answer is None:
            self.first_answer = len(self.chunk_ns)
        self.chunk_ns.append(stamp_ns)
        self.chunk_tokens.append(tokens)

    @property
    def output_tokens(self) -> int:
        """The server's count where given, else the sum over chunks."""
        if self.server_output_tokens is not None:
            return self.server_output_tokens
        return sum(self.chunk_tokens)


class StreamSink(Protocol):
    """The `CompletionSink` methods a streaming SUT uses."""

    def streamed(self, query_id: int, done_ns: int, stream: TokenStream,
                 components: Mapping[str, int] | None = None, output: Any = None) -> None:
        """The stream ended well at `done_ns` (the read that closed it)."""

    def failed(self, query_id: int, done_ns: int, kind: str, detail: str | None = None,
               stream: TokenStream | None = None) -> None:
        """The stream failed; `stream` keeps what had arrived."""

    def sample_streamed(self, query_id: int, stream: TokenStream) -> None:
        """One sample's stream of a query of several samples (Offline) ended well; the
        query then ends with `done(query_id, done_ns, sample_done_ns=...)`."""
