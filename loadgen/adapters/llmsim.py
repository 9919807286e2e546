"""`llmsim:`, a simulated token server with a cost model, so token metrics can be checked exactly.

Continuous batching at iteration level (as vLLM and TGI schedule): an iteration
starting at t admits waiting requests that arrived by t, first come first
served, while fewer than `max_seqs` sequences run; it lasts

    step_base + step_per_seq * batch + prefill_per_token * (input tokens admitted)

and at its end every sequence in the batch emits one token (a new one its first).
A sequence of N output tokens (its prompt's max_tokens; always exactly N) so
takes N iterations. Tokens go out `chunk` at a time (the last chunk may be
short); the first `reasoning` tokens of each answer are reasoning (TTFO comes
after them). Every stamp is computed from the model, never read off a timer,
and the engine's precise timers deliver it; a request alone thus has
TTFT = step_base + step_per_seq + prefill_per_token * I from its arrival and
TPOT = step_base + step_per_seq. `capacity_qps` gives the saturated rate.

Without a token workload (no `use_prompts`), every request has `input` and
`output` tokens. A turn of a multi-turn session (`issue_turn`) has as input its
own prompt plus every earlier prompt and answer of the session: turn k's input
is turn k-1's input and output plus its own prompt's tokens. A query of several samples (Offline) runs one sequence per
sample, reports each through `sample_streamed` and ends with `done`.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from loadgen.adapters.base import CompletionSink, Timers
from loadgen.adapters.history import Exchanged, Histories
from loadgen.adapters.sim import parse_duration_ns
from loadgen.adapters.tokens import Prompt, PromptSource, TokenStream, Turn
from loadgen.errors import SutSpecError, suggest

__all__ = ["CostModel", "DecodeEngine", "LlmSimSut", "Sequence", "capacity_qps"]


@dataclass(frozen=True, slots=True)
class CostModel:
    """Iteration cost in ns, and the cap on sequences in flight."""

    step_base_ns: int = 5_000_000
    step_per_seq_ns: int = 100_000
    prefill_per_token_ns: int = 20_000
    max_seqs: int = 64
    chunk: int = 1
    reasoning: int = 0

    def iteration_ns(self, batch: int, admitted_input_tokens: int) -> int:
        """How long one iteration of `batch` sequences lasts."""
        return (self.step_base_ns + self.step_per_seq_ns * batch
                + self.prefill_per_token_ns * admitted_input_tokens)


def capacity_qps(model: CostModel, input_tokens: float, output_tokens: float) -> float:
    """Requests/s at saturation (every iteration full at `max_seqs`), for mean lengths.

    Each request holds a slot for N iterations of (base + per_seq * M) and adds its
    prefill once: 1 / (N * (base / M + per_seq) + prefill * I).
    """
    per_request_ns = (output_tokens * (model.step_base_ns / model.max_seqs
                                       + model.step_per_seq_ns)
                      + model.prefill_per_token_ns * input_tokens)
    return 1e9 / per_request_ns


@dataclass(slots=True)
class Sequence:
    """One request's sequence: what it asks and what it has streamed."""

    query_id: int
    arrival_ns: int
    input_tokens: int
    output_tokens: int
    stream: TokenStream = field(default_factory=TokenStream)
    produced: int = 0
    pending: int = 0  # tokens produced and not yet sent in a chunk
    turn: Turn | None = None  # its turn of a multi-turn session
    prompt: Prompt | None = None  # the turn's own message


class DecodeEngine:
    """The batching model in virtual time: no clock, no loop; `LlmSimSut` drives it."""

    def __init__(self, model: CostModel) -> None:
        self.model = model
        self.waiting: collections.deque[Sequence] = collections.deque()
        self.running: list[Sequence] = []
        self.iteration_end_ns: int | None = None  # None: idle

    def submit(self, seq: Sequence) -> bool:
        """A sequence arrives (arrivals come in time order); True if an iteration began."""
        self.waiting.append(seq)
        if self.iteration_end_ns is None:
            self._begin(seq.arrival_ns)
            return True
        return False

    def end_iteration(self) -> list[Sequence]:
        """Close the current iteration: each sequence emits a token; returns those finished.

        The next iteration (if any work is left) begins at once.
        """
        end = self.iteration_end_ns
        assert end is not None, "no iteration in progress"
        model = self.model
        finished: list[Sequence] = []
        still: list[Sequence] = []
        for seq in self.running:
            seq.produced += 1
            seq.pending += 1
            done = seq.produced >= seq.output_tokens
            reasoning_ends = seq.produced == model.reasoning
            if done or seq.pending >= model.chunk or reasoning_ends:
                seq.stream.add(end, seq.pending, answer=seq.produced > model.reasoning)
                seq.pending = 0
            (finished if done else still).append(seq)
        self.running = still
        self.iteration_end_ns = None
        if self.running or (self.waiting and self.waiting[0].arrival_ns <= end):
            self._begin(end)
        elif self.waiting:
            self._begin(self.waiting[0].arrival_ns)
        return finished

    def _begin(self, start_ns: int) -> None:
        admitted = 0
        room = self.model.max_seqs - len(self.running)
        while room > 0 and self.waiting and self.waiting[0].arrival_ns <= start_ns:
            seq = self.waiting.popleft()
            self.running.append(seq)
            admitted += seq.input_tokens
            room -= 1
        self.iteration_end_ns = start_ns + self.model.iteration_ns(len(self.running), admitted)


_KEYS = {"step_base": "step_base_ns", "step_per_seq": "step_per_seq_ns",
         "prefill_per_token": "prefill_per_token_ns"}
_INTS = ("max_seqs", "chunk", "reasoning", "input", "output")


class LlmSimSut:
    """`llmsim:key=value,...`: the `DecodeEngine` on the engine's precise timers."""

    name = "llmsim"

    def __init__(self, model: CostModel, input_tokens: int = 128, output_tokens: int = 64,
                 clock: Callable[[], int] = time.perf_counter_ns) -> None:
        if min(model.max_seqs, model.chunk, input_tokens, output_tokens) < 1 or min(
                model.step_base_ns, model.step_per_seq_ns, model.prefill_per_token_ns,
                model.reasoning) < 0 or model.step_base_ns + model.step_per_seq_ns == 0:
            raise SutSpecError("llmsim: max_seqs, chunk, input and output must be at least 1, "
                               "times and reasoning not negative, a step longer than 0")
        self.model = model
        self.default_prompt = Prompt("", input_tokens, output_tokens, True)
        self.engine = DecodeEngine(model)
        self._clock = clock
        self._prompts: PromptSource | None = None
        self._sink: Any = None  # the collector: CompletionSink and StreamSink
        self._timers: Timers | None = None
        self._samples_left: dict[int, int] = {}
        self._sample_done: dict[int, list[int]] = {}
        self._histories = Histories()

    @classmethod
    def from_options(cls, options: dict[str, str]) -> LlmSimSut:
        """Build from `llmsim:` options (durations like 5ms, 100us)."""
        unknown = sorted(set(options) - set(_KEYS) - set(_INTS))
        if unknown:
            known = sorted([*_KEYS, *_INTS])
            raise SutSpecError(f"llmsim: unknown key {unknown[0]!r}{suggest(unknown[0], known)}; "
                               f"known: {', '.join(known)}")
        try:
            times = {_KEYS[k]: parse_duration_ns(v) for k, v in options.items() if k in _KEYS}
            ints = {k: int(v) for k, v in options.items() if k in _INTS}
        except ValueError as exc:
            raise SutSpecError(f"llmsim: bad value: {exc}") from None
        input_tokens, output_tokens = ints.pop("input", 128), ints.pop("output", 64)
        return cls(CostModel(**times, **ints), input_tokens, output_tokens)

    def use_prompts(self, prompts: PromptSource) -> None:
        """Take each sample's lengths from the run's prompts."""
        self._prompts = prompts

    async def start(self, sink: CompletionSink, timers: Timers) -> None:
        self._sink, self._timers = sink, timers

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        assert self._timers is not None, "issue before start"
        now = self._clock()
        indices = sample_indices.tolist()
        if len(indices) > 1:
            self._samples_left[query_id] = len(indices)
            self._sample_done[query_id] = []
        began = False
        for index in indices:
            prompt = self._prompt(int(index))
            seq = Sequence(query_id, now, prompt.input_tokens, prompt.max_tokens)
            seq.stream.input_tokens = prompt.input_tokens
            began = self.engine.submit(seq) or began
        if began:
            self._arm()

    def issue_turn(self, query_id: int, sample: int, turn: Turn) -> None:
        """One turn of a session: its prompt after the session's earlier prompts and answers."""
        assert self._timers is not None, "issue before start"
        prompt = self._prompt(sample)
        seq = Sequence(query_id, self._clock(), self._histories.input_tokens(turn, prompt),
                       prompt.max_tokens, turn=turn, prompt=prompt)
        seq.stream.input_tokens = seq.input_tokens
        seq.stream.turn = turn.index
        if self.engine.submit(seq):
            self._arm()

    def _prompt(self, index: int) -> Prompt:
        return self.default_prompt if self._prompts is None else self._prompts.prompt(index)

    def _arm(self) -> None:
        end = self.engine.iteration_end_ns
        if end is not None and self._timers is not None:
            self._timers.call_at_ns(end, self._iteration_ended)

    def _iteration_ended(self) -> None:
        if self._sink is None:
            return
        for seq in self.engine.end_iteration():
            self._finish(seq)
        self._arm()

    def _finish(self, seq: Sequence) -> None:
        stream, sink = seq.stream, self._sink
        stream.server_output_tokens = seq.produced
        stream.finish_reason = "length"
        done_ns = stream.chunk_ns[-1]
        if seq.turn is not None and seq.prompt is not None:
            self._histories.ended(seq.turn, Exchanged(seq.prompt, "", seq.produced))
        left = self._samples_left.get(seq.query_id)
        if left is None:
            sink.streamed(seq.query_id, done_ns, stream)
            return
        sink.sample_streamed(seq.query_id, stream)
        self._sample_done[seq.query_id].append(done_ns)
        if left > 1:
            self._samples_left[seq.query_id] = left - 1
            return
        del self._samples_left[seq.query_id]
        sink.done(seq.query_id, done_ns, sample_done_ns=self._sample_done.pop(seq.query_id))

    async def stop(self) -> None:
        self._sink = self._timers = None

    def describe(self) -> dict[str, Any]:
        m = self.model
        return {"sut": "llmsim", "step_base_ns": m.step_base_ns,
                "step_per_seq_ns": m.step_per_seq_ns,
                "prefill_per_token_ns": m.prefill_per_token_ns, "max_seqs": m.max_seqs,
                "chunk": m.chunk, "reasoning": m.reasoning,
                "default_input_tokens": self.default_prompt.input_tokens,
                "default_output_tokens": self.default_prompt.max_tokens}
