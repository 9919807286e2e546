"""A scripted SSE server on loopback, and a sink that collects what a streaming SUT reports.

Each request the server reads (head and Content-Length body) is answered by the next
`Script` queued: a list of steps, each `bytes` to write, a float to sleep that many
seconds, or `CLOSE` to close the connection there. The server stamps every write with
`perf_counter_ns()` (`Served.writes`), so a test can compare the client's read stamps with
the moments the bytes left. It runs in the test's own event loop, bound to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from loadgen.adapters.registry import make_sut
from loadgen.adapters.streaming import StreamingSut
from loadgen.adapters.tokens import Prompt, TokenStream

__all__ = ["CLOSE", "Collected", "Prompts", "ScriptedServer", "Served", "chat_chunk", "chunk",
           "completion_chunk", "event", "head", "run_bounded", "run_streams", "scripted",
           "scripted_sut", "sse_response"]

CLOSE = "close"
HELLO = Prompt("hello", 1, 4)
Step = bytes | float | str
T = TypeVar("T")


def head(status: int = 200, chunked: bool = True, length: int | None = None,
         extra: str = "") -> bytes:
    """A response head: chunked, Content-Length, or neither (close-delimited)."""
    lines = [f"HTTP/1.1 {status} X", "Content-Type: text/event-stream"]
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    elif length is not None:
        lines.append(f"Content-Length: {length}")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    """One HTTP chunk carrying `data` (the terminal chunk when empty)."""
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n"


def event(payload: Any) -> bytes:
    """An SSE event whose data is `payload` (JSON-encoded unless bytes)."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return b"data: " + data + b"\n\n"


def chat_chunk(content: str | None = None, *, role: bool = False, reasoning: str | None = None,
               reasoning_key: str = "reasoning_content", finish: str | None = None,
               usage: dict[str, int] | None = None, choices: Any = "default") -> dict[str, Any]:
    """A chat.completion.chunk as vLLM writes it."""
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta[reasoning_key] = reasoning
    doc: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion.chunk",
                           "created": 1, "model": "m"}
    doc["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}] \
        if choices == "default" else choices
    if choices is None:
        doc["choices"] = None
    elif choices == "missing":
        del doc["choices"]
    if usage is not None:
        doc["usage"] = usage
    return doc


def completion_chunk(text: str | None = None, finish: str | None = None,
                     usage: dict[str, int] | None = None, choices: Any = "default") -> dict[str, Any]:
    """A text_completion chunk as vLLM writes it."""
    doc: dict[str, Any] = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m"}
    doc["choices"] = [{"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}] \
        if choices == "default" else choices
    if choices is None:
        doc["choices"] = None
    elif choices == "missing":
        del doc["choices"]
    if usage is not None:
        doc["usage"] = usage
    return doc


def sse_response(events: Iterable[Any], done: bool = True, gap_s: float = 0.0) -> list[Step]:
    """A chunked 200 answer: one HTTP chunk per event, `gap_s` apart, `[DONE]`, the end."""
    steps: list[Step] = [head()]
    for i, payload in enumerate(events):
        if i and gap_s:
            steps.append(gap_s)
        steps.append(chunk(event(payload)))
    if done:
        steps.append(chunk(event(b"[DONE]")))
    steps.append(chunk(b""))
    return steps


@dataclass
class Served:
    """What the server saw and did: requests, and each write's (stamp, bytes)."""

    requests: list[bytes] = field(default_factory=list)
    writes: list[tuple[int, bytes]] = field(default_factory=list)


class ScriptedServer:
    """Answers each request with the next queued script."""

    def __init__(self, scripts: Sequence[list[Step]]) -> None:
        self.scripts = list(scripts)
        self.served = Served()
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        """Stop listening; end every connection's handler."""
        assert self._server is not None
        for _ in range(8):  # a connection the kernel accepted reaches asyncio in a few turns
            await asyncio.sleep(0)  # (one accepted after `close` leaks: asyncio 3.11)
        self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await asyncio.sleep(0)  # the transports' closing callbacks

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        try:
            while self.scripts:
                try:
                    raw = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in raw.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                self.served.requests.append(raw + await reader.readexactly(length))
                for step in self.scripts.pop(0):
                    if isinstance(step, bytes):
                        writer.write(step)
                        self.served.writes.append((time.perf_counter_ns(), step))
                        await writer.drain()
                    elif isinstance(step, float):
                        await asyncio.sleep(step)
                    else:
                        return
        finally:
            self._handlers.discard(task)
            writer.close()


@dataclass
class Collected:
    """What a sink received, by query id."""

    streams: dict[int, tuple[int, TokenStream]] = field(default_factory=dict)
    failures: dict[int, tuple[int, str, str | None, TokenStream | None]] = field(
        default_factory=dict)
    samples: dict[int, list[TokenStream]] = field(default_factory=dict)
    queries: dict[int, int] = field(default_factory=dict)
    """Queries of several samples done, with their done stamp."""
    finished: asyncio.Event = field(default_factory=asyncio.Event)
    expected: int = 1

    def streamed(self, query_id: int, done_ns: int, stream: TokenStream,
                 components: Any = None, output: Any = None) -> None:
        assert query_id not in self.streams and query_id not in self.failures
        self.streams[query_id] = (done_ns, stream)
        self._check()

    def failed(self, query_id: int, done_ns: int, kind: str, detail: str | None = None,
               stream: TokenStream | None = None) -> None:
        assert query_id not in self.streams and query_id not in self.failures
        self.failures[query_id] = (done_ns, kind, detail, stream)
        self._check()

    def sample_streamed(self, query_id: int, stream: TokenStream) -> None:
        self.samples.setdefault(query_id, []).append(stream)

    def done(self, query_id: int, done_ns: int, components: Any = None,
             sample_done_ns: Any = None, output: Any = None) -> None:
        assert query_id not in self.queries
        self.queries[query_id] = done_ns
        self._check()

    def _check(self) -> None:
        if len(self.streams) + len(self.failures) + len(self.queries) >= self.expected:
            self.finished.set()


class Prompts:
    """Every sample index gets the same prompt (counted by `tokenizer`, as the run's are)."""

    def __init__(self, prompt: Prompt, tokenizer: str | None = None) -> None:
        self._prompt = prompt
        if tokenizer is not None:
            self.tokenizer = tokenizer

    def prompt(self, index: int) -> Prompt:
        return self._prompt


@contextlib.asynccontextmanager
async def scripted(scripts: Sequence[list[Step]]) -> AsyncIterator[ScriptedServer]:
    """A started server, closed at the end."""
    server = ScriptedServer(scripts)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


async def run_streams(sut: StreamingSut, count: int = 1,
                      prompt: Prompt = HELLO, timeout_s: float = 10,
                      tokenizer: str | None = None) -> tuple[Collected, dict[int, int]]:
    """Issue `count` single-sample queries; (what came back, each query's issue stamp)."""
    sink = Collected(expected=count)
    sut.use_prompts(Prompts(prompt, tokenizer))
    await sut.start(sink, None)  # type: ignore[arg-type]
    issued = {}
    try:
        for query_id in range(count):
            issued[query_id] = time.perf_counter_ns()
            sut.issue(query_id, np.array([query_id]))
        await asyncio.wait_for(sink.finished.wait(), timeout_s)
    finally:
        await sut.stop()
    return sink, issued


def scripted_sut(port: int, options: str = "", scheme: str = "openai") -> StreamingSut:
    """A streaming SUT (`scheme`://) of model `m` on the loopback `port`, one request in
    flight; `options` (`&key=value...`) on top."""
    sut = make_sut(f"{scheme}://127.0.0.1:{port}/m?max_in_flight=1{options}")
    assert isinstance(sut, StreamingSut)
    return sut


def run_bounded(coro: Coroutine[Any, Any, T], timeout_s: float = 30) -> T:
    """`coro` run to its end in a new event loop, `timeout_s` at most."""
    return asyncio.run(asyncio.wait_for(coro, timeout_s))
