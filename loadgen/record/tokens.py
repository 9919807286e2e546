"""Token-stream recording: one streamed answer's stamps -> TTFT, ITL, TPOT and the rest.

One timing model for every streaming SUT (`adapters.tokens` documents the
stamps). Per request, from its scheduled time (the `_sent_ns` twins count
from the send; the issue lag is the collector's):

- TTFT: first chunk of any kind; TTFO: first answer (not reasoning) chunk;
  E2E: last token chunk.
- ITL (token-weighted): every gap between consecutive tokens, pooled; a chunk
  of k tokens counts its gap once and k-1 zero gaps, so a request gives N-1
  values summing to E2E - TTFT. Where the server's total N differs from the sum
  of the chunks' counts (the client's tokenizer), N is spread over the chunks in
  proportion to those counts (`spread`), so N-1 values hold there too.
- TPOT (request-weighted): (E2E - TTFT)/(N - 1); none for a one-token output.
- chunk gaps (every gap between chunks, apart from token gaps), normalized
  latency E2E/N, the longest stall (the widest gap between two tokens),
  input and output tokens, output tokens/s per request (kept in milli-tokens/s);
  the usage details servers send (cached prompt tokens, reasoning tokens) as counters.

A stream that failed part-way keeps its TTFT, TTFO, ITL and chunk gaps; the
figures of a whole answer (E2E, TPOT, ...) are taken from finished ones only,
and the failure counts as a miss for goodput. `TokenTally` is the mergeable
form: HDR histograms and integer counters, added exactly across processes.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.adapters.tokens import TokenStream
from loadgen.plan.tokenslo import NO_TOKEN_SLOS, TokenSlos
from loadgen.record.histograms import (
    HistText,
    Recorder,
    decode,
    encode,
    merge,
    new_histogram,
    written,
)
from loadgen.record.turns import TURN_METRICS, TurnHistograms, TurnRecorder, merge_turns

__all__ = ["TOKEN_COUNTERS", "TOKEN_HISTOGRAMS", "TokenRecorder", "TokenTally", "spread"]

TOKEN_HISTOGRAMS = (
    "ttft_ns", "ttft_sent_ns", "ttfo_ns", "ttfo_sent_ns", "e2e_ns", "e2e_sent_ns",
    "tpot_ns", "itl_ns", "chunk_gap_ns", "normalized_ns", "stall_ns",
    "input_tokens", "output_tokens", "output_mtok_per_s",
)
TOKEN_COUNTERS = (
    "streams",  # measured streams that finished well
    "failed",  # measured queries that failed (with or without a partial stream)
    "partial",  # of those, failures that had delivered tokens
    "no_output",  # finished streams without a single token
    "input_total", "input_known", "output_total",
    "compared", "client_total", "server_total", "mismatched", "abs_diff_total",
    "good", "good_tokens",  # finished streams meeting every goodput SLO, and their tokens
    "ttft_over", "tpot_over", "tpot_requests",  # against MLPerf's token-mode targets
    "ttft_requests",
    "finish_other",  # finished streams whose finish_reason was given and not `length`
    # the server's usage details, over the finished streams that report them
    "cached_known", "cached_total", "cached_input_total",  # prefix-cache hits (tokens)
    "reasoning_known", "reasoning_total",
)


@dataclass(frozen=True, slots=True)
class TokenTally:
    """A run's token figures in mergeable form (histograms keyed by TOKEN_HISTOGRAMS)."""

    histograms: dict[str, HdrHistogram]
    counters: dict[str, int]
    turns: TurnHistograms = field(default_factory=dict)
    """Multi-turn sessions: TTFT and TPOT by turn index (`record.turns`)."""

    def encode(self, text: HistText = encode) -> dict[str, Any]:
        """Plain values: histograms as `text`, V2 base64 by default (empty ones as None)."""
        return {"histograms": {k: written(h, text) for k, h in self.histograms.items()},
                "counters": dict(self.counters),
                "turns": {str(turn): {k: written(h, text) for k, h in hists.items()}
                          for turn, hists in self.turns.items()}}

    @classmethod
    def decode(cls, doc: dict[str, Any]) -> TokenTally:
        """The inverse of `encode` (a malformed histogram raises ResultError)."""
        hists = doc.get("histograms", {})
        counters = doc.get("counters", {})
        return cls({k: new_histogram() if hists.get(k) is None else decode(hists[k])
                    for k in TOKEN_HISTOGRAMS},
                   {k: int(counters.get(k, 0)) for k in TOKEN_COUNTERS},
                   {int(turn): {k: new_histogram() if per.get(k) is None else decode(per[k])
                                for k in TURN_METRICS}
                    for turn, per in doc.get("turns", {}).items()})

    @classmethod
    def merge(cls, parts: Sequence[TokenTally]) -> TokenTally:
        """One tally holding every part's counts, exactly."""
        return cls({k: merge(p.histograms[k] for p in parts) for k in TOKEN_HISTOGRAMS},
                   {k: sum(p.counters[k] for p in parts) for k in TOKEN_COUNTERS},
                   merge_turns(p.turns for p in parts))


class TokenRecorder:
    """Files each measured stream into its recorders and counters; `tally` hands them over."""

    def __init__(self, slos: TokenSlos = NO_TOKEN_SLOS,
                 targets: TokenSlos = NO_TOKEN_SLOS) -> None:
        self.slos = slos
        self.targets = targets
        self.recorders = {name: Recorder() for name in TOKEN_HISTOGRAMS}
        self.counters = dict.fromkeys(TOKEN_COUNTERS, 0)
        r = self.recorders
        self._ttft, self._ttft_sent = r["ttft_ns"], r["ttft_sent_ns"]
        self._ttfo, self._ttfo_sent = r["ttfo_ns"], r["ttfo_sent_ns"]
        self._itl, self._chunk_gap = r["itl_ns"], r["chunk_gap_ns"]
        self.turns = TurnRecorder()

    def streamed(self, scheduled_ns: int, sent_ns: int, stream: TokenStream) -> None:
        """One measured stream that ended well."""
        c = self.counters
        c["streams"] += 1
        if stream.finish_reason not in (None, "length"):
            c["finish_other"] += 1
        self._counts(stream)
        n = stream.output_tokens
        tokens = stream.chunk_tokens
        if stream.server_output_tokens is not None and n > 0 and sum(tokens) != n:
            tokens = spread(n, tokens)
        stall = self._timings(scheduled_ns, sent_ns, stream, tokens)
        chunks = stream.chunk_ns
        if not chunks or n < 1:
            c["no_output"] += 1
            return
        r = self.recorders
        first, last = chunks[0], chunks[-1]
        e2e = last - scheduled_ns
        r["e2e_ns"].add(e2e)
        r["e2e_sent_ns"].add(last - sent_ns)
        r["normalized_ns"].add(e2e // n)
        r["stall_ns"].add(stall)
        r["output_tokens"].add(n)
        if e2e > 0:
            r["output_mtok_per_s"].add(n * 10**12 // e2e)
        tpot = None
        if n > 1:
            tpot = (last - first) // (n - 1)
            r["tpot_ns"].add(tpot)
            c["tpot_requests"] += 1
            if self.targets.tpot_ns and tpot > self.targets.tpot_ns:
                c["tpot_over"] += 1
        if stream.turn:
            self.turns.add(stream.turn, first - scheduled_ns, tpot)
        if self.slos.met(first - scheduled_ns, tpot, stall, e2e):
            c["good"] += 1
            c["good_tokens"] += n

    def failed(self, scheduled_ns: int, sent_ns: int, stream: TokenStream | None) -> None:
        """One measured query that failed; a partial stream's timings are kept."""
        self.counters["failed"] += 1
        if stream is not None and stream.chunk_ns:
            self.counters["partial"] += 1
            self._timings(scheduled_ns, sent_ns, stream, stream.chunk_tokens)

    def _timings(self, scheduled_ns: int, sent_ns: int, stream: TokenStream,
                 tokens: list[int]) -> int:
        """TTFT, TTFO, ITL and chunk gaps of what arrived, `tokens` in each chunk; returns
        the longest token gap."""
        chunks = stream.chunk_ns
        if not chunks:
            return 0
        first = chunks[0]
        ttft = first - scheduled_ns
        self._ttft.add(ttft)
        self._ttft_sent.add(first - sent_ns)
        self.counters["ttft_requests"] += 1
        if self.targets.ttft_ns and ttft > self.targets.ttft_ns:
            self.counters["ttft_over"] += 1
        if stream.first_answer is not None:
            answer = chunks[stream.first_answer]
            self._ttfo.add(answer - scheduled_ns)
            self._ttfo_sent.add(answer - sent_ns)
        itl, chunk_gap = self._itl, self._chunk_gap
        count = len(chunks)
        if count > 1:
            gaps = [b - a for a, b in itertools.pairwise(chunks)]
            chunk_gap.extend(gaps)
            if tokens.count(1) == count:  # a token per chunk: the token gaps are the chunk gaps
                itl.extend(gaps)
                return max(gaps)
        return self._token_gaps(chunks, tokens)

    def _token_gaps(self, chunks: list[int], tokens: list[int]) -> int:
        """ITL of chunks carrying any number of tokens; returns the widest token gap."""
        values: list[int] = []
        stall = 0
        last_token = None
        for t, k in zip(chunks, tokens, strict=True):
            if not k:
                continue
            if last_token is not None:
                gap = t - last_token
                values.append(gap)
                if gap > stall:  # noqa: PLR1730 - per chunk: a compare, not a call
                    stall = gap
            if k > 1:
                values += itertools.repeat(0, k - 1)
            last_token = t
        self._itl.extend(values)
        return stall

    def _counts(self, stream: TokenStream) -> None:
        c, r = self.counters, self.recorders
        if stream.input_tokens is not None:
            c["input_total"] += stream.input_tokens
            c["input_known"] += 1
            r["input_tokens"].add(stream.input_tokens)
        c["output_total"] += stream.output_tokens
        if stream.cached_tokens is not None:
            c["cached_known"] += 1
            c["cached_total"] += stream.cached_tokens
            c["cached_input_total"] += stream.input_tokens or 0
        if stream.reasoning_tokens is not None:
            c["reasoning_known"] += 1
            c["reasoning_total"] += stream.reasoning_tokens
        server = stream.server_output_tokens
        if server is not None and stream.client_tokens:
            c["compared"] += 1
            c["client_total"] += stream.client_tokens
            c["server_total"] += server
            diff = abs(stream.client_tokens - server)
            c["abs_diff_total"] += diff
            c["mismatched"] += diff > 0

    def tally(self) -> TokenTally:
        """The figures so far (every buffer flushed)."""
        return TokenTally({k: r.histogram for k, r in self.recorders.items()},
                          dict(self.counters), self.turns.histograms())


def spread(total: int, weights: list[int]) -> list[int]:
    """`total` tokens spread over chunks in proportion to `weights` (the client's counts), by
    rounding the running sum, so they add up to `total` exactly: a stream whose server
    counted N tokens yields N - 1 ITL values whatever the client counted."""
    weight = sum(w for w in weights if w > 0)
    if weight <= 0:
        weights, weight = [1] * len(weights), len(weights)
    out: list[int] = []
    running = given = 0
    for w in weights:
        running += max(w, 0)
        upto = (2 * running * total + weight) // (2 * weight)
        out.append(upto - given)
        given = upto
    return out
