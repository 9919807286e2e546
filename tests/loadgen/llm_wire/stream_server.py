"""A scripted token-streaming server process: `python -m tests.loadgen.llm_wire.stream_server`.

Every request is answered on the same script, timed from the moment its request was read:
the first chunk `--ttft-ms` later, then `--chunks` chunks in all, `--gap-ms` apart, each
of `--per-chunk` tokens (`" t"` each); the first `--reasoning` chunks are reasoning deltas;
`--usage` adds the final usage chunk, `--continuous` the cumulative usage in every chunk.
`--stall-at K --stall-ms S`: the K-th request (from 0) holds every answer S ms (a stalled
server). Writes are stamped with `perf_counter_ns()` (CLOCK_MONOTONIC, the clock the client
reads) and each request's stamps go to `--log` as a JSON line: {"recv": ns, "writes": [...]}.
Prints `port=N` once listening on 127.0.0.1; exits after `--lifetime-s`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from typing import Any

ANSWER = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(doc: Any) -> bytes:
    return _chunk(b"data: " + (doc if isinstance(doc, bytes) else json.dumps(doc).encode())
                  + b"\n\n")


class Script:
    """The answer's events, and when each is due after the request."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stall_until = 0

    def events(self, chat: bool) -> list[bytes]:
        a = self.args
        out = []
        for i in range(a.chunks):
            text = " t" * a.per_chunk
            last = i == a.chunks - 1
            finish = "length" if last else None
            if chat:
                delta = {"reasoning_content": text} if i < a.reasoning else {"content": text}
                doc: dict[str, Any] = {"id": "c", "object": "chat.completion.chunk", "model": "m",
                                       "choices": [{"index": 0, "delta": delta,
                                                    "finish_reason": finish}]}
            else:
                doc = {"id": "c", "object": "text_completion", "model": "m",
                       "choices": [{"index": 0, "text": text, "finish_reason": finish}]}
            if a.continuous:
                doc["usage"] = {"prompt_tokens": 16, "completion_tokens": (i + 1) * a.per_chunk}
            out.append(_event(doc))
        if a.usage:
            out[-1] += _event({"id": "c", "choices": [], "usage": {
                "prompt_tokens": 16, "completion_tokens": a.chunks * a.per_chunk}})
        out[-1] += _event(b"[DONE]") + b"0\r\n\r\n"
        return out


class Handler(asyncio.Protocol):
    def __init__(self, script: Script, log: Any, count: list[int]) -> None:
        self.script, self.log, self.count = script, log, count
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        recv = time.perf_counter_ns()
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].lower()
        length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
        if len(self.buf) < end + 4 + length:
            return
        chat = b"/chat/" in head.split(b"\r\n")[0]
        self.buf = self.buf[end + 4 + length:]
        a = self.script.args
        if self.count[0] == a.stall_at:
            self.script.stall_until = recv + int(a.stall_ms * 1e6)
        self.count[0] += 1
        asyncio.get_running_loop().create_task(self.answer(recv, chat))

    async def answer(self, recv: int, chat: bool) -> None:
        a = self.script.args
        assert self.transport is not None
        self.transport.write(ANSWER.encode())
        start = max(recv, self.script.stall_until)
        writes = []
        for i, data in enumerate(self.script.events(chat)):
            due = start + int((a.ttft_ms + i * a.gap_ms) * 1e6)
            wait = due - time.perf_counter_ns()
            if wait > 0:
                await asyncio.sleep(wait / 1e9)
            writes.append(time.perf_counter_ns())  # stamped before: a lower bound of the send
            self.transport.write(data)
        self.log.write(json.dumps({"recv": recv, "writes": writes}) + "\n")
        self.log.flush()


async def main(args: argparse.Namespace, log: Any) -> None:
    script, count = Script(args), [0]
    server = await asyncio.get_running_loop().create_server(
        lambda: Handler(script, log, count), "127.0.0.1", 0)
    print(f"port={server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.sleep(args.lifetime_s)
    server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    for name, kind, default in (("ttft-ms", float, 20.0), ("gap-ms", float, 5.0),
                                ("chunks", int, 8), ("per-chunk", int, 1), ("reasoning", int, 0),
                                ("stall-at", int, -1), ("stall-ms", float, 0.0),
                                ("lifetime-s", float, 120.0)):
        parser.add_argument(f"--{name}", type=kind, default=default)
    parser.add_argument("--usage", action="store_true")
    parser.add_argument("--continuous", action="store_true")
    parser.add_argument("--log", required=True)
    options = parser.parse_args()
    with open(options.log, "a") as log_file:
        asyncio.run(main(options, log_file))
