"""What the token-streaming HTTP adapters share: the exchange of one stream, and the SUT frame.

An `Exchange` is one streamed request (the pool's tag, a `streamhttp.StreamHandler`). The
bytes of each read go through its `SseParser`, and every event's payload goes to the
protocol's reader, all stamped with that read's `now_ns`:

* fast path: after one slow-path chunk teaches the JSON around the text field (`learn`), a
  chunk that matches it byte for byte but for a text with no quote or backslash is read by
  slicing (no JSON decode); the text's tokens are counted by `tokencount.ChunkCounter`;
  when every whole event of a read matches it, they are read at once (`_whole_events`: one
  regex scan whose matches must tile the events exactly, one dictionary lookup per text);
* slow path: the protocol's `read(exchange, payload, now_ns)` decodes the JSON and calls
  `add` for a chunk that carries text (reasoning or answer); it raises `StreamError` for an
  in-band error or a payload that is not JSON.

A stream ends well when the response ends (`finish`): `sink.streamed`. It fails with its
partial `TokenStream` kept: an in-band error (`stream_error`, at the read that brought it;
the rest of the body is read and dropped so the connection is kept), a close-delimited body
without the protocol's end marker or a connection lost mid-stream (`stream_cut`), a status
other than 200 (`http_<status>` with the status line and the body's message as detail).

Fail closed (`protocol_error`, the connection dropped where the body is still coming): a 200
whose Content-Type is not `text/event-stream` (its type and first bytes named), a 200 event
stream that ended without a single event, a chunk whose text is not valid Unicode (one rule
on every path: `ChunkCounter` and the JSON decode both refuse it). A stream past one of its
caps (`caps`: bytes, events, seconds from the send; options or scaled by `max_tokens`) ends
as `stream_cap`, the cap named, what it delivered kept. `sent` stamps the request as it goes
on the wire (after any wait for a connection): the stream's `sent_ns`.

`StreamingSut` is the `SystemUnderTest` frame both `openai://` and `generate://` fill in: the
options they share (`KEYS`), the pool, the prompts, and the request cache.

Longer than 400 lines: the `Exchange` is the one state machine every read walks (the hot
path), and splitting it would add an attribute hop per event.
"""

from __future__ import annotations

import abc
import dataclasses
import json
import os
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from loadgen.adapters.base import CompletionSink, Timers
from loadgen.adapters.history import Exchanged, Histories
from loadgen.adapters.http import error_detail
from loadgen.adapters.preflight import PREFLIGHT_TOKENS, check_stream
from loadgen.adapters.tokencount import TOKENIZERS, ChunkCounter
from loadgen.adapters.tokens import Prompt, PromptSource, StreamSink, TokenStream, Turn
from loadgen.adapters.wire.endpoint import Endpoint, tls_context
from loadgen.adapters.wire.fasthttp import request_bytes
from loadgen.adapters.wire.sse import SseParser
from loadgen.adapters.wire.streamhttp import StreamConnection, StreamPool
from loadgen.errors import SutError, SutSpecError

__all__ = ["KEYS", "Exchange", "Group", "StreamError", "StreamingSut", "decode", "error_message", "learn"]

KEYS = ("max_in_flight", "timeout_ms", "tls", "ca", "insecure", "api_key_env", "extra",
        "tokenizer", "ignore_eos", "max_stream_bytes", "max_stream_events", "max_stream_s",
        "preflight")
"""Option keys every streaming adapter takes."""
DEFAULT_IN_FLIGHT = 256
ERROR_BODY = 4096
"""Bytes of a non-200 body kept for the failure's detail."""
EXCERPT = 160
"""Bytes of an answer that is not an event stream quoted in the failure's detail."""
CAP_BYTES = (1 << 20, 8192)
CAP_EVENTS = (1024, 4)
CAP_SECONDS = (600, 1)
"""A stream's default caps, each (base, per token of the request's `max_tokens`): 1 MiB +
8 KiB a token, 1,024 events + 4 a token, 600 s + 1 s a token (a loaded server may queue a
request long before it streams); `max_stream_bytes`, `max_stream_events`, `max_stream_s`
set them outright."""
EVENT_STREAM = b"text/event-stream"
REQUEST_CACHE = 4096
"""Serialised requests remembered, by sample index."""
LEARN_CHUNKS = 4
"""Text chunks read one event at a time while the fast path's template is not learned; past
them, a stream whose chunks teach none is read by the general path alone."""


class StreamError(Exception):
    """A chunk that ends the stream as a failure: (kind, detail)."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.detail = kind, detail


def learn(exchange: Exchange, payload: bytes, text: str, answer: bool) -> None:
    """Remember the JSON around `text` in `payload` for the fast path (when it occurs once);
    never for a session's turn, whose answer text is kept (every chunk is decoded)."""
    if exchange.answer is not None:
        return
    for literal in (json.dumps(text, ensure_ascii=False).encode(), json.dumps(text).encode()):
        if payload.count(literal) == 1:
            i = payload.find(literal)
            prefix, suffix = payload[:i + 1], payload[i + len(literal) - 1:]
            exchange.prefix, exchange.suffix = prefix, suffix
            exchange.template_answer = answer
            exchange.pattern = re.compile(b"data: " + re.escape(prefix) + rb'([^"\\\n]*)'
                                          + re.escape(suffix) + b"\n\n")
            exchange.frame = 8 + len(prefix) + len(suffix)
            exchange.head, exchange.close = b"data: " + prefix, suffix + b"\n\n"
            return


class Exchange:
    """One streamed request and its stream as it arrives."""

    __slots__ = ("answer", "byte_cap", "close", "connection", "deadline_ns", "done_marker",
                 "error_body", "event_cap", "failed", "first_bytes", "frame", "group", "head",
                 "message", "not_events", "pattern", "prefix", "prompt", "query_id", "quiet",
                 "received", "seconds_cap", "sse", "status", "stream", "suffix", "sut",
                 "template_answer", "turn", "usage_out")

    def __init__(self, sut: StreamingSut, query_id: int, prompt: Prompt,
                 group: Group | None = None, turn: Turn | None = None,
                 message: Prompt | None = None) -> None:
        self.sut, self.query_id, self.prompt, self.group = sut, query_id, prompt, group
        self.turn, self.message = turn, message  # a session's turn and its own message
        # the answer's text as it arrives, kept for the session's next turn
        self.answer: list[str] | None = [] if turn is not None and not turn.last else None
        self.stream = TokenStream(turn=0 if turn is None else turn.index)
        self.sse = SseParser()
        self.prefix = self.suffix = self.head = self.close = b""
        self.pattern: re.Pattern[bytes] | None = None
        self.frame = 0
        self.template_answer = True
        self.done_marker = self.failed = False
        self.status = 0
        self.usage_out = 0
        self.error_body = b""
        self.byte_cap, self.event_cap, self.seconds_cap = sut.caps(prompt.max_tokens)
        self.received = self.quiet = 0
        """Body bytes read; events that carried no tokens (role, usage, [DONE], ...)."""
        self.deadline_ns = 1 << 62  # the time cap, from the send
        self.connection: StreamConnection | None = None
        self.not_events: bytes | None = None
        """The Content-Type of a 200 answer that is not an event stream."""
        self.first_bytes = b""
        """The body's first bytes, until an event arrives (to name what came instead)."""

    def add(self, now_ns: int, tokens: int, client: int, answer: bool) -> None:
        """One chunk of `tokens` output tokens (`client` by the client's count)."""
        stream = self.stream
        if answer and stream.first_answer is None:
            stream.first_answer = len(stream.chunk_ns)
        stream.chunk_ns.append(now_ns)
        stream.chunk_tokens.append(tokens)
        stream.client_tokens += client

    # -- streamhttp.StreamHandler ------------------------------------------------------------

    def sent(self, now_ns: int, connection: StreamConnection) -> None:
        """The request went on the wire: the send stamp (after any wait for a connection),
        and the time cap counts from here."""
        self.stream.sent_ns = now_ns
        self.deadline_ns = now_ns + self.seconds_cap * 1_000_000_000
        self.connection = connection

    def started(self, status: int, content_type: bytes | None, now_ns: int) -> None:
        """A 200 head whose Content-Type is not `text/event-stream` is no stream: its body's
        first bytes are kept to name it (`not_a_stream`)."""
        self.status = status
        if status == 200 and (content_type is None or content_type.split(b";", 1)[0].strip()
                              .lower() != EVENT_STREAM):
            self.not_events = content_type or b"(none)"

    def body(self, status: int, data: bytes, now_ns: int) -> None:
        """Body bytes of one read: parse its events, stamp each with `now_ns` (hot path)."""
        if self.failed:
            return
        if status != 200 or self.not_events is not None:
            self.status = status
            if len(self.error_body) < ERROR_BODY:
                self.error_body += data[:ERROR_BODY]
            if self.not_events is not None and len(self.error_body) >= EXCERPT:
                self._not_a_stream(now_ns)
            return
        self.status = 200
        self.received += len(data)
        self._read(data, now_ns)
        if (self.received > self.byte_cap or now_ns > self.deadline_ns
                or len(self.stream.chunk_ns) + self.quiet > self.event_cap) and not self.failed:
            self._capped(now_ns)

    def _read(self, data: bytes, now_ns: int) -> None:
        """Parse the events of one read of a 200 event stream (the fast paths first)."""
        if self.pattern is None:
            if not self.first_bytes:
                self.first_bytes = data[:EXCERPT]
            if self.answer is not None or len(self.stream.chunk_ns) >= LEARN_CHUNKS:
                self._events(data, now_ns)
                return
            data = self._until_learned(self.sse.take(data), now_ns)
            if self.pattern is None or self.failed:
                return
        data = self.sse.take(data)
        head, close = self.head, self.close
        end = len(data) - len(close)
        # one event a read (a decode step): its first LF the one that ends it
        if end >= len(head) and data.find(b"\n", len(head)) == len(data) - 2 \
                and data.endswith(close) and data.startswith(head):
            text = data[len(head):end]
            if b'"' not in text and b"\\" not in text:
                if text:
                    counter = self.sut.counter
                    try:
                        tokens = counter.known.get(text) or counter.count(text)
                    except UnicodeError as exc:
                        self._failed(now_ns, "protocol_error", _not_text(exc))
                        return
                    self.add(now_ns, tokens, tokens, self.template_answer)
                return
        try:
            rest = self._whole_events(data, now_ns)
        except UnicodeError as exc:
            self._failed(now_ns, "protocol_error", _not_text(exc))
            return
        if rest:
            self._events(rest, now_ns)

    def _until_learned(self, data: bytes, now_ns: int) -> bytes:
        """Read the whole events of `data` one at a time until one teaches the template (or
        `LEARN_CHUNKS` text chunks did not); answer the rest, for the bulk path. Any point
        right after LF LF ends an event, so each piece is whole events."""
        start = 0
        while self.pattern is None and not self.failed:
            if len(self.stream.chunk_ns) >= LEARN_CHUNKS:
                break
            end = data.find(b"\n\n", start) + 2
            if end < 2:
                break
            self._events(data[start:end], now_ns)
            start = end
        if self.pattern is None and not self.failed:
            self._events(data[start:], now_ns)
            return b""
        return data[start:] if start else data

    def _events(self, data: bytes, now_ns: int) -> None:
        """Parse the events of `data` one by one (the general path)."""
        if self.failed:
            return
        try:
            payloads = self.sse.feed(data)
        except ValueError as exc:
            self._failed(now_ns, "protocol_error", str(exc))
            return
        sut = self.sut
        read, count = sut.read, sut.counter.count
        stream = self.stream
        for payload in payloads:
            prefix = self.prefix
            if prefix and payload.startswith(prefix) and payload.endswith(self.suffix):
                text = payload[len(prefix):len(payload) - len(self.suffix)]
                if b'"' not in text and b"\\" not in text:
                    if text:
                        try:
                            tokens = count(text)
                        except UnicodeError as exc:
                            self._failed(now_ns, "protocol_error", _not_text(exc))
                            return
                        if self.template_answer and stream.first_answer is None:
                            stream.first_answer = len(stream.chunk_ns)
                        stream.chunk_ns.append(now_ns)
                        stream.chunk_tokens.append(tokens)
                        stream.client_tokens += tokens
                    continue
            chunks = len(stream.chunk_ns)
            try:
                read(self, payload, now_ns)
            except StreamError as exc:
                self._failed(now_ns, exc.kind, exc.detail)
                return
            except UnicodeError as exc:  # a text that is no Unicode (a lone surrogate)
                self._failed(now_ns, "protocol_error", _not_text(exc))
                return
            self.quiet += len(stream.chunk_ns) == chunks

    def _whole_events(self, data: bytes, now_ns: int) -> bytes:
        """Read every complete event of `data` at once when all match the template (the
        bulk path: one regex scan, one lookup per text); answer what is left to parse."""
        cut = data.rfind(b"\n\n") + 2
        if cut < 2 or b"\r" in data:
            return data
        pattern = self.pattern
        assert pattern is not None
        texts = pattern.findall(data, 0, cut)
        if not texts:
            return data
        covered = len(texts) * self.frame + sum(map(len, texts))
        if covered != cut:  # other events after the template's (usage, [DONE])? take those before
            texts = pattern.findall(data, 0, covered)
            if not texts or len(texts) * self.frame + sum(map(len, texts)) != covered:
                return data
            cut = covered
        self._counted(texts, now_ns)
        return data[cut:]

    def _counted(self, texts: list[bytes], now_ns: int) -> None:
        """Add the chunks of template events' `texts`, read at `now_ns` (a lookup a text)."""
        counter = self.sut.counter
        counts = list(map(counter.known.get, texts))
        if None in counts or 0 in counts:
            counts = [n for n in map(counter.count, texts) if n]
        stream = self.stream
        if self.template_answer and stream.first_answer is None and counts:
            stream.first_answer = len(stream.chunk_ns)
        stream.chunk_ns += [now_ns] * len(counts)
        stream.chunk_tokens += counts  # type: ignore[arg-type]
        stream.client_tokens += sum(counts)  # type: ignore[arg-type]

    def finish(self, now_ns: int, framed: bool) -> None:
        """The response ended: report the stream (or why it failed)."""
        if self.failed:
            return
        if self.status != 200:
            self._failed(now_ns, f"http_{self.status}", error_detail(self.status,
                                                                     self.error_body))
            return
        if self.not_events is not None:
            self._not_a_stream(now_ns)
            return
        if not self.stream.chunk_ns and not self.quiet and not self.done_marker:
            self._failed(now_ns, "protocol_error", "a 200 event stream that held no SSE event: "
                         f"{self.first_bytes or self.sse.pending[:EXCERPT]!r}")
            return
        if not framed and self.sut.end_marker and not self.done_marker:
            self._failed(now_ns, "stream_cut", "the connection closed before [DONE]")
            return
        self.sut.finished(self, now_ns)

    def fail(self, now_ns: int, kind: str, detail: str | None) -> None:
        """The exchange failed below the stream (connection, timeout, framing)."""
        if self.failed:
            return
        if kind == "connection_reset" and self.status:
            kind = "stream_cut"
        self._failed(now_ns, kind, detail)

    def _not_a_stream(self, now_ns: int) -> None:
        """Fail a 200 answer that is not an event stream, naming what it was."""
        self._failed(now_ns, "protocol_error", "a 200 answer that is not an event stream: "
                     f"Content-Type {(self.not_events or b'').decode('latin-1')!r}, body "
                     f"{self.error_body[:EXCERPT]!r}")
        self._drop("protocol_error")

    def _capped(self, now_ns: int) -> None:
        """End a stream that passed one of its caps, keeping what it delivered."""
        if self.received > self.byte_cap:
            cap = f"max_stream_bytes={self.byte_cap} (bytes read: {self.received})"
        elif now_ns > self.deadline_ns:
            cap = f"max_stream_s={self.seconds_cap} (seconds since the send)"
        else:
            cap = f"max_stream_events={self.event_cap} (events read)"
        self._failed(now_ns, "stream_cap", f"the stream passed {cap}; what it delivered "
                     "is kept as a partial stream")
        self._drop("stream_cap")

    def _drop(self, kind: str) -> None:
        """Drop the connection of a stream still being read (its end is not waited for)."""
        connection = self.connection
        if connection is not None and connection.tag is self:
            connection.abort(kind, time.perf_counter_ns())

    def _failed(self, now_ns: int, kind: str, detail: str | None) -> None:
        self.failed = True
        if self.turn is not None:
            self.sut.histories.ended(self.turn, None)
        group = self.group
        if group is not None:
            group.left -= 1
            if group.failed:
                return
            group.failed = True
        self.sut.sink.failed(self.query_id, now_ns, kind, detail,
                             stream=self.stream if self.stream.chunk_ns else None)


class Group:
    """The samples of one query of several (Offline): each its own stream, the query done
    when the last one is, failed at the first that fails."""

    __slots__ = ("failed", "last_ns", "left")

    def __init__(self, size: int) -> None:
        self.left, self.last_ns, self.failed = size, 0, False


class StreamingSut(abc.ABC):
    """A `SystemUnderTest` that streams tokens over HTTP/1.1 + SSE; subclasses say the protocol
    (`protocol`, `path`, `end_marker`, `body`, `read`)."""

    protocol = ""
    end_marker = False
    """Whether the protocol ends a stream with a marker event (`[DONE]`)."""

    def __init__(self, endpoint: Endpoint) -> None:
        e = self.endpoint = endpoint
        self.name = e.url
        self.max_in_flight = e.number("max_in_flight", DEFAULT_IN_FLIGHT, 1)
        self.timeout_ms = e.number("timeout_ms", 0)
        self.ignore_eos = e.flag("ignore_eos", True)
        self.check_first = e.flag("preflight", True)
        """Whether `preflight` checks the endpoint before the run (`preflight=0`: not)."""
        self.tokenizer = e.options.get("tokenizer", "approx")
        if self.tokenizer not in TOKENIZERS and not Path(self.tokenizer).is_file():
            raise SutSpecError(f"{e.url}: tokenizer={self.tokenizer!r}: expected one of "
                               f"{', '.join(TOKENIZERS)} or a tokenizer file")
        self.counter = ChunkCounter(self.tokenizer)
        self.extra = _json_object(e, "extra")
        self.max_stream_bytes = e.number("max_stream_bytes", 0)
        self.max_stream_events = e.number("max_stream_events", 0)
        self.max_stream_s = e.number("max_stream_s", 0)
        self.ssl = tls_context(e, e.flag("insecure"))
        self.headers: dict[str, str] = {"Accept": "text/event-stream"}
        variable = e.options.get("api_key_env")
        if variable is not None:
            key = os.environ.get(variable)
            if not key:
                raise SutSpecError(f"{e.url}: api_key_env={variable}: that environment variable "
                                   "is not set")
            self.headers["Authorization"] = f"Bearer {key}"
        self.fixed_output_short = 0
        """Streams asked for a fixed output length that ended short of it, for another
        reason than `length`."""
        self._prompts: PromptSource | None = None
        self._sink: StreamSink | None = None
        self._completions: CompletionSink | None = None
        self._pool: StreamPool | None = None
        self._requests: dict[int, bytes] = {}
        self.left_at_stop: dict[str, int] = {}
        """Streams abandoned at `stop`: `queued` (waiting for a connection), `sent` (no
        answer yet), `streaming` (answer begun); empty when none was."""
        self.histories = Histories()
        """Multi-turn sessions' earlier turns, sent again with each next turn."""

    @property
    def sink(self) -> StreamSink:
        """Where streams are reported (set by `start`)."""
        assert self._sink is not None, "no sink before start"
        return self._sink

    def caps(self, max_tokens: int) -> tuple[int, int, int]:
        """A stream's caps (bytes, events, seconds) for a request of `max_tokens`: the
        options where set, else `CAP_*` scaled by `max_tokens`."""
        return (self.max_stream_bytes or CAP_BYTES[0] + CAP_BYTES[1] * max_tokens,
                self.max_stream_events or CAP_EVENTS[0] + CAP_EVENTS[1] * max_tokens,
                self.max_stream_s or CAP_SECONDS[0] + CAP_SECONDS[1] * max_tokens)

    def use_prompts(self, prompts: PromptSource) -> None:
        """The run's prompts, by sample index; their `tokenizer` counts the output unless the
        spec names one."""
        self._prompts = prompts
        self._requests.clear()
        tokenizer = getattr(prompts, "tokenizer", None)
        if "tokenizer" not in self.endpoint.options and isinstance(tokenizer, str) and (
                tokenizer in TOKENIZERS or Path(tokenizer).is_file()):
            self.tokenizer = tokenizer
            self.counter = ChunkCounter(tokenizer)

    async def start(self, sink: CompletionSink, timers: Timers) -> None:
        """Open the connections (one per stream in flight)."""
        if self._prompts is None:
            raise SutError(f"{self.name}: a streaming SUT needs a token workload (prompts); "
                           "set input_tokens/output_tokens or dataset")
        self._sink, self._completions = cast(StreamSink, sink), sink
        e = self.endpoint
        self._pool = StreamPool(e.host, e.port, self.max_in_flight, self.ssl,
                                self.timeout_ms * 1_000_000)
        try:
            await self._pool.start()
        except OSError as exc:
            raise SutError(f"{self.name}: cannot connect: {exc}") from exc

    async def preflight(self) -> None:
        """Before the run: one short request of the first prompt must stream text back
        (SutError with what is wrong otherwise); see `adapters.preflight`."""
        assert self._prompts is not None, "preflight before start"
        if not self.check_first:
            return
        prompt = dataclasses.replace(self._prompts.prompt(0), fixed_output=False,
                                     max_tokens=PREFLIGHT_TOKENS)
        await check_stream(self.endpoint, self.request(prompt), self.path, self.ssl,
                           self.has_text, await self.preflight_hint())

    async def preflight_hint(self) -> str:
        """Said after a failed preflight request (a protocol may know the fix)."""
        return ""

    def has_text(self, doc: Mapping[str, Any]) -> bool:
        """Whether one decoded event carries text (the preflight's last check)."""
        return True

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        """Send each sample's request (or queue it for a free connection); never blocks."""
        pool, prompts = self._pool, self._prompts
        assert pool is not None and prompts is not None, "issue before start"
        group = Group(len(sample_indices)) if len(sample_indices) > 1 else None
        for index in sample_indices.tolist():
            prompt = prompts.prompt(index)
            payload = self._requests.get(index)
            if payload is None:
                payload = self.request(prompt)
                if len(self._requests) < REQUEST_CACHE:
                    self._requests[index] = payload
            pool.submit(Exchange(self, query_id, prompt, group), payload)

    def issue_turn(self, query_id: int, sample: int, turn: Turn) -> None:
        """Send a session's turn: its own message after the session's earlier turns."""
        pool, prompts = self._pool, self._prompts
        assert pool is not None and prompts is not None, "issue before start"
        message = prompts.prompt(sample)
        history = self.histories.before(turn)
        grown = dataclasses.replace(message,
                                    input_tokens=self.histories.input_tokens(turn, message))
        pool.submit(Exchange(self, query_id, grown, turn=turn, message=message),
                    self.request(message, history))

    def request(self, prompt: Prompt, history: Sequence[Exchanged] = ()) -> bytes:
        """The whole HTTP request of one prompt (after a session's `history`)."""
        body = json.dumps(self.body(prompt, history), separators=(",", ":")).encode()
        return request_bytes("POST", self.path, self.endpoint.address, self.headers, body)

    def finished(self, exchange: Exchange, now_ns: int) -> None:
        """A stream ended well: note an early stop of a fixed-length output, report it (a
        sample of a query of several: the query is done with its last sample)."""
        stream = exchange.stream
        if stream.input_tokens is None:  # no usage: the workload's count
            stream.input_tokens = exchange.prompt.input_tokens
        if exchange.turn is not None and exchange.message is not None:
            self.histories.ended(exchange.turn, Exchanged(
                exchange.message, "".join(exchange.answer or ()), stream.output_tokens))
        if exchange.prompt.fixed_output and stream.finish_reason not in (None, "length") \
                and stream.output_tokens < exchange.prompt.max_tokens:  # GuideLLM's mock
            self.fixed_output_short += 1  # says "stop" at max_tokens: not short
        group = exchange.group
        if group is None:
            self.sink.streamed(exchange.query_id, now_ns, stream)
            return
        group.left -= 1
        group.last_ns = max(group.last_ns, now_ns)
        if group.failed:
            return
        self.sink.sample_streamed(exchange.query_id, stream)
        if not group.left:
            assert self._completions is not None
            self._completions.done(exchange.query_id, group.last_ns)

    async def stop(self) -> None:
        """Close the connections; streams in flight are abandoned (and counted, by where
        they were, in `left_at_stop`)."""
        if self._pool is not None:
            self.left_at_stop = _left(self._pool)
            await self._pool.close()
            self._pool = None

    def describe(self) -> dict[str, Any]:
        """Endpoint, protocol, model and how requests are sent (never the API key)."""
        e = self.endpoint
        return {"sut": self.name, "endpoint": e.url, "protocol": self.protocol,
                "model": e.model, "max_in_flight": self.max_in_flight, "tls": e.tls,
                "timeout_ms": self.timeout_ms, "tokenizer": self.tokenizer,
                "ignore_eos": self.ignore_eos, "extra": sorted(self.extra),
                "api_key": "api_key_env" in e.options,
                "fixed_output_short": self.fixed_output_short} \
            | ({"left_at_stop": self.left_at_stop} if self.left_at_stop else {})

    # -- what a protocol fills in -------------------------------------------------------------

    @property
    @abc.abstractmethod
    def path(self) -> str:
        """The request's path."""

    @abc.abstractmethod
    def body(self, prompt: Prompt, history: Sequence[Exchanged] = ()) -> dict[str, Any]:
        """The JSON request body of one prompt, after a session's earlier turns."""

    @abc.abstractmethod
    def read(self, exchange: Exchange, payload: bytes, now_ns: int) -> None:
        """Read one event's payload (the slow path); raise StreamError to fail the stream."""


def _left(pool: StreamPool) -> dict[str, int]:
    """Where the streams still open are: `queued`, `sent` (no head yet), `streaming`; {} if
    none is (an unfinished run says whether the server ever answered them)."""
    sent = [tag for tag in pool.in_flight() if isinstance(tag, Exchange) and not tag.failed]
    streaming = sum(1 for tag in sent if tag.status)
    left = {"queued": len(pool.pending), "sent": len(sent) - streaming, "streaming": streaming}
    return left if any(left.values()) else {}


def _json_object(endpoint: Endpoint, key: str) -> Mapping[str, Any]:
    """A JSON-object option (empty when absent)."""
    text = endpoint.options.get(key)
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SutSpecError(f"{endpoint.url}: {key}={text!r}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise SutSpecError(f"{endpoint.url}: {key}={text!r}: expected a JSON object")
    return value


def _not_text(exc: UnicodeError) -> str:
    """The detail of a chunk whose text is not valid UTF-8 (or holds a lone surrogate)."""
    return f"a chunk's text is not valid Unicode: {exc}"


def decode(payload: bytes) -> dict[str, Any]:
    """One event's JSON object; StreamError when it is not one."""
    try:
        doc = json.loads(payload)
    except ValueError:
        raise StreamError("protocol_error",
                          f"an SSE event is not JSON: {payload[:120]!r}") from None
    if not isinstance(doc, dict):
        raise StreamError("protocol_error", f"an SSE event is not a JSON object: {payload[:120]!r}")
    return doc


def error_message(error: Any) -> str:
    """The message of an in-band `error` value (an object with `message`, or a string)."""
    if isinstance(error, dict):
        message = error.get("message")
        code = error.get("code") or error.get("type")
        text = message if isinstance(message, str) else json.dumps(error)
        return f"{code}: {text}" if code is not None else text
    return error if isinstance(error, str) else json.dumps(error)
