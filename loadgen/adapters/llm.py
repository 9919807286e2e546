"""In-process adapter for the built-in LLM engine: token streams with no network between.

    builtin:tiny-llm[,max_num_seqs=N,...,scheduler=continuous|static]

takes the engine knobs of `sut.llm.config` (also `small-llm`, `causal:pkg.module:factory`).
The session hands the run's prompts over with `use_prompts`; a query's sample index i is
`prompts.prompt(i)`, sent greedy with `max_tokens` (and `ignore_eos` plus `min_tokens` when
the workload fixes the output length). Each delta the engine emits is one chunk of the
query's `TokenStream`, stamped at the engine's emit (on its thread), and handed to the loop
with `call_soon_threadsafe`. The stream is reported with `sink.streamed` and the engine's
per-request timings as components: `queue`, `prefill`, `decode` and `server_total`.

A query of several samples (Offline) runs them as separate requests and reports one stream
when the last ends: every sample's chunks in stamp order, token counts summed.
A turn of a multi-turn session (`issue_turn`) is sent as the session's earlier prompts
and answers (their text concatenated) followed by its own prompt, so its input grows by
the previous prompt and answer. Failures are reported with kind `overloaded` (the engine's waiting queue is full), `abort`
(the engine stopped first) or `error`, keeping the chunks that had arrived.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from loadgen.adapters.base import CompletionSink, Timers, parse_options
from loadgen.adapters.history import Exchanged, Histories, transcript
from loadgen.adapters.tokens import Prompt, PromptSource, StreamSink, TokenStream, Turn
from loadgen.errors import SutError, SutSpecError
from sut import errors as sut_errors
from sut.llm.config import EngineConfig, parse_engine_options
from sut.llm.engine import LLMEngine
from sut.llm.names import is_llm_model
from sut.llm.sequence import Delta, SamplingParams
from sut.llm.tokenizer import encode

__all__ = ["LlmSut", "is_llm_spec"]

_PREFIX = "builtin:"


def is_llm_spec(spec: str) -> bool:
    """Whether `builtin:MODEL,...` names an LLM (served by this adapter)."""
    return spec.startswith(_PREFIX) and is_llm_model(spec[len(_PREFIX):].partition(",")[0])


class _Query:
    """The samples of one query still running, and the chunks they streamed."""

    __slots__ = ("answer", "cached_tokens", "chunks", "components", "error", "finish_reason",
                 "input_tokens", "left", "message", "output_tokens", "turn")

    def __init__(self, samples: int, turn: Turn | None = None,
                 message: Prompt | None = None) -> None:
        self.left = samples
        self.turn, self.message = turn, message  # a session's turn and its own prompt
        self.answer: list[str] | None = [] if turn is not None and not turn.last else None
        self.chunks: list[tuple[int, int]] = []
        self.input_tokens = self.output_tokens = self.cached_tokens = 0
        self.finish_reason: str | None = None
        self.error: tuple[str, str] | None = None
        self.components: dict[str, int] = {}


class LlmSut:
    """A streaming `SystemUnderTest` over an `LLMEngine` in this process."""

    shares_gil = True  # the engine's thread needs the GIL between torch ops

    def __init__(self, model: str, config: EngineConfig, name: str | None = None) -> None:
        self.name = name or f"{_PREFIX}{model}"
        self._model = model
        self._config = config
        self._engine: LLMEngine | None = None
        self._prompts: PromptSource | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sink: StreamSink | None = None
        self.histories = Histories()

    @classmethod
    def from_spec(cls, spec: str) -> LlmSut:
        """Build from `builtin:MODEL[,knob=value...]`; SutSpecError names what is wrong."""
        model, _, rest = spec[len(_PREFIX):].partition(",")
        try:
            return cls(model, parse_engine_options(parse_options(rest)))
        except (SutSpecError, sut_errors.SutError) as exc:
            raise SutSpecError(f"--sut {spec!r}: {exc}") from None

    def use_prompts(self, prompts: PromptSource) -> None:
        """The run's prompts, by sample index."""
        self._prompts = prompts

    async def start(self, sink: CompletionSink, timers: Timers) -> None:
        """Load the model, size the KV cache, warm up and start the engine thread."""
        if self._prompts is None:
            raise SutError(f"{self.name} streams tokens: the run needs a token workload"
                           " (input_tokens and output_tokens, or a dataset)")
        self._loop = asyncio.get_running_loop()
        self._sink = sink  # type: ignore[assignment]  # a collector that also streams
        try:
            self._engine = await asyncio.to_thread(LLMEngine.build, self._model, self._config)
            await asyncio.to_thread(self._engine.start)
        except sut_errors.SutError as exc:
            raise SutError(f"{self.name}: {exc}") from exc

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        """Submit each sample as one engine request; never blocks."""
        assert self._engine is not None and self._prompts is not None
        query = _Query(len(sample_indices))
        for index in sample_indices:
            prompt = self._prompts.prompt(int(index))
            self._submit(query_id, query, prompt, prompt.text)

    def issue_turn(self, query_id: int, sample: int, turn: Turn) -> None:
        """Submit a session's turn: its earlier prompts and answers, then its own prompt."""
        assert self._prompts is not None
        prompt = self._prompts.prompt(sample)
        self._submit(query_id, _Query(1, turn, prompt), prompt,
                     transcript(self.histories.before(turn), prompt))

    def _submit(self, query_id: int, query: _Query, prompt: Prompt, text: str) -> None:
        assert self._engine is not None
        params = SamplingParams(max_tokens=prompt.max_tokens, temperature=0.0,
                                ignore_eos=prompt.fixed_output,
                                min_tokens=prompt.max_tokens if prompt.fixed_output else 0)
        try:
            self._engine.submit(encode(text), params, self._on_output(query_id, query))
        except sut_errors.SutError as exc:
            kind = "overloaded" if isinstance(exc, sut_errors.Overloaded) else "error"
            self._settle(query_id, query, error=(kind, f"{type(exc).__name__}: {exc}"))

    def _on_output(self, query_id: int, query: _Query) -> Callable[[Delta], None]:
        def on_output(delta: Delta) -> None:  # the engine thread
            if delta.new_tokens:
                query.chunks.append((delta.emit_ns, delta.new_tokens))
                if query.answer is not None:
                    query.answer.append(delta.text)
            if not delta.finished:
                return
            query.input_tokens += delta.prompt_tokens
            query.output_tokens += delta.output_tokens
            query.cached_tokens += delta.cached_tokens
            query.finish_reason = delta.finish_reason
            if delta.timings is not None:
                t = delta.timings
                query.components = {"queue": t.queue_ns, "prefill": t.prefill_ns,
                                    "decode": t.decode_ns,
                                    "server_total": t.finished_ns - t.arrival_ns}
            error = None
            if delta.finish_reason in ("abort", "error"):
                error = (delta.finish_reason, delta.error or "the engine stopped the request")
            self._settle(query_id, query, error)
        return on_output

    def _settle(self, query_id: int, query: _Query, error: tuple[str, str] | None) -> None:
        """One sample ended; report the query once all have."""
        query.error = query.error or error
        query.left -= 1
        if query.left > 0:
            return
        now = time.perf_counter_ns()
        stream = TokenStream(input_tokens=query.input_tokens,
                             server_output_tokens=query.output_tokens,
                             cached_tokens=query.cached_tokens,
                             finish_reason=query.finish_reason,
                             turn=0 if query.turn is None else query.turn.index)
        for stamp, tokens in sorted(query.chunks):
            stream.add(stamp, tokens)
        stream.client_tokens = sum(tokens for _, tokens in query.chunks)
        done_ns = stream.chunk_ns[-1] if stream.chunk_ns else now
        assert self._sink is not None
        if query.turn is not None and query.message is not None:  # before the next turn's send
            kept = None if query.error is not None else Exchanged(
                query.message, "".join(query.answer or ()), query.output_tokens)
            self._post(self.histories.ended, query.turn, kept)
        if query.error is not None:
            self._post(self._sink.failed, query_id, now, query.error[0], query.error[1],
                       stream)
        else:
            self._post(self._sink.streamed, query_id, done_ns, stream, query.components)

    def _post(self, method: Callable[..., None], *args: Any) -> None:
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(method, *args)
        except RuntimeError:  # the loop has closed: the run is over
            pass

    async def stop(self) -> None:
        """Stop the engine; requests still running end as `abort`."""
        if self._engine is not None:
            await asyncio.to_thread(self._engine.stop)

    def describe(self) -> dict[str, Any]:
        """`sut` (this adapter's name), then the engine's model, device and knobs."""
        engine = {} if self._engine is None else self._engine.describe()
        return {"sut": self.name, **engine}
