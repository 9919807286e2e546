"""Token-stream client speed: loadgen's openai:// adapter against a plain aiohttp SSE loop.

A local OpenAI-compatible server (an asyncio Protocol on uvloop, in its own process so it
does not share the client's core) streams chat.completion.chunk events, one token per
event, each event its own HTTP chunk, then a usage chunk and `[DONE]`. Three figures:

1. tokens/s our client parses in one process: `--streams` concurrent streams of
   `--tokens` tokens, the server writing each pre-rendered response as fast as it can
   (`--burst` bytes per write), each finished stream re-issued at once, for `--duration` s;
   counted from the adapter's TokenStreams (every token stamped, counted, checked against
   usage). Beside it, what the server alone pushes to a client that only counts bytes: the
   ceiling on this box, so a reader sees whether the client or the server bound the figure.
2. the same for the loop peers use (aiohttp, `async for line in resp.content`, json.loads
   of each `data:` line, a perf_counter_ns stamp per token), same server, same streams.
3. concurrent streams held with p99 read-stamp lag under 1 ms: C streams, each getting one
   token every `--period-ms` (a decode rate), their phases spread over the period; each
   event carries the server's perf_counter_ns just before its write (CLOCK_MONOTONIC on
   Linux, one clock for every process on the host, checked at start), and the lag is the
   read stamp the adapter recorded for the token minus that stamp (the pairing: the adapter
   parses in read order, so its read stamps sorted follow the order its counter saw the
   server stamps; a negative lag would fail the run), over the tokens sent while every
   stream is open (the middle 80% of the run; the whole run's p99 is printed beside: here
   every stream starts and ends within one period). The median of `--lag-trials` runs per
   C; C doubles from `--start-streams` until p99 passes 1 ms for both loadgen and a bare
   Protocol that only stamps reads (what the box allows); the figure is the largest C under.

With `--workers N` it measures only the read-stamp lag of `--lag-streams` (1,000) paced
streams spread over N client processes (each its own adapter and loop, all started
together at a barrier), pooled, beside the same streams from one process: whether
spreading the streams over processes keeps the tail down.

It prints figures; no pass/fail (targets: >= 500,000 tokens/s, >= 3x aiohttp, >= 1,000
streams).

    .venv/bin/python benchmarks/llm_client.py [--duration 3] [--streams 8] [--tokens 4000]
    .venv/bin/python benchmarks/llm_client.py --workers 4 [--lag-streams 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import time
from typing import Any, Self

import numpy as np

from loadgen.adapters.openai import OpenAISut
from loadgen.adapters.streaming import Exchange
from loadgen.adapters.tokencount import ChunkCounter
from loadgen.adapters.tokens import Prompt, TokenStream
from loadgen.adapters.wire.streamhttp import StreamConnection, StreamPool
from loadgen.engine.session import run_loop

WORDS = [" " + "".join(chr(97 + (i // 26 ** k) % 26) for k in range(3)) for i in range(1000)]
"""Distinct one-token words (three letters each)."""
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
PREFIX = (b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
          b'"choices":[{"index":0,"delta":{"content":"')
SUFFIX = b'"},"logprobs":null,"finish_reason":null}]}\n\n'


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _tail(tokens: int) -> bytes:
    usage = {"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 4,
                                                          "completion_tokens": tokens}}
    return (_chunk(b"data: " + json.dumps(usage).encode() + b"\n\n")
            + _chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")


def response(tokens: int) -> bytes:
    """The whole fast response: head, `tokens` one-token chunks, usage, `[DONE]`."""
    return HEAD + b"".join(_chunk(PREFIX + WORDS[i % len(WORDS)].encode() + SUFFIX)
                           for i in range(tokens)) + _tail(tokens)


def serve(sock: socket.socket, tokens: int, burst: int, period_ms: float) -> None:
    """The server process: each request gets `tokens` tokens, as fast as it can
    (`period_ms` 0: the response pre-rendered, written `burst` bytes a write) or one every
    `period_ms`, each stamped with the server's perf_counter_ns just before its write."""
    import uvloop

    whole = response(tokens)
    bursts = [whole[i:i + burst] for i in range(0, len(whole), burst)]
    tail = _tail(tokens)

    class Stream(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport
            self.buf = b""

        def data_received(self, data: bytes) -> None:
            self.buf += data
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            length = int(self.buf[:end].lower().split(b"content-length:")[1].split(b"\r\n")[0])
            if len(self.buf) < end + 4 + length:
                return
            self.buf = self.buf[end + 4 + length:]
            loop = asyncio.get_running_loop()
            if period_ms:
                loop.create_task(self.paced())
            else:
                loop.create_task(self.fast())

        async def fast(self) -> None:
            for data in bursts:
                self.transport.write(data)
                await asyncio.sleep(0)

        async def paced(self) -> None:
            self.transport.write(HEAD)
            period = period_ms / 1e3
            await asyncio.sleep(np.random.default_rng().uniform(0, period))
            loop = asyncio.get_running_loop()
            start = loop.time()
            for i in range(tokens):
                await asyncio.sleep(max(0.0, start + i * period - loop.time()))
                stamp = b" %d" % time.perf_counter_ns()
                self.transport.write(_chunk(PREFIX + stamp + SUFFIX))
            self.transport.write(tail)

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Stream, sock=sock, backlog=4096)
        await server.serve_forever()

    uvloop.run(main())


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) process `pid` has used, from /proc (Linux)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Server:
    """A server process on a loopback port, stopped by pid."""

    def __init__(self, tokens: int, burst: int = 64, period_ms: float = 0.0) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4096)
        self.port = self.sock.getsockname()[1]
        self.proc = multiprocessing.get_context("fork").Process(
            target=serve, args=(self.sock, tokens, burst, period_ms), daemon=True)

    def __enter__(self) -> Self:
        self.proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        self.proc.join(10)
        self.sock.close()


class Loop:
    """A sink that re-issues each finished stream until the deadline, counting tokens."""

    def __init__(self, sut: OpenAISut, deadline_ns: int) -> None:
        self.sut, self.deadline = sut, deadline_ns
        self.tokens = self.streams = self.errors = 0
        self.next_id = 0
        self.open = 0
        self.all_done = asyncio.Event()

    def issue(self) -> None:
        self.open += 1
        self.next_id += 1
        self.sut.issue(self.next_id, np.array([0]))

    def streamed(self, query_id: int, done_ns: int, stream: TokenStream, *args: Any) -> None:
        assert stream.client_tokens == stream.server_output_tokens
        self.tokens += len(stream.chunk_ns)
        self.streams += 1
        self._next(done_ns)

    def failed(self, query_id: int, done_ns: int, kind: str, detail: str | None = None,
               stream: TokenStream | None = None) -> None:
        self.errors += 1
        self._next(done_ns)

    def _next(self, now: int) -> None:
        self.open -= 1
        if now < self.deadline:
            self.issue()
        elif not self.open:
            self.all_done.set()


async def ours(port: int, streams: int, tokens: int, duration: float) -> float:
    """Tokens/s parsed by the openai:// adapter."""
    sut = OpenAISut.from_spec(f"openai://127.0.0.1:{port}/m?max_in_flight={streams}")
    sut.use_prompts(_Prompts(tokens))
    start = time.perf_counter_ns()
    loop = Loop(sut, start + int(duration * 1e9))
    await sut.start(loop, None)  # type: ignore[arg-type]
    start = time.perf_counter_ns()
    loop.deadline = start + int(duration * 1e9)
    for _ in range(streams):
        loop.issue()
    await loop.all_done.wait()
    elapsed = (time.perf_counter_ns() - start) / 1e9
    await sut.stop()
    assert not loop.errors, f"{loop.errors} streams failed"
    return loop.tokens / elapsed


async def drain(port: int, streams: int, tokens: int, duration: float) -> float:
    """Tokens/s the server alone can push: the same streams read by a bare Protocol that only
    counts bytes (no parsing) and re-issues each response at its end, in this process."""
    loop = asyncio.get_running_loop()
    request = OpenAISut.from_spec(f"openai://127.0.0.1:{port}/m").request(
        _Prompts(tokens).prompt(0))
    size = len(response(tokens))
    got = [0]
    deadline = time.perf_counter() + duration
    done = asyncio.Event()
    left = [streams]

    class Drain(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport: Any = transport
            self.left = size
            transport.write(request)  # type: ignore[attr-defined]

        def data_received(self, data: bytes) -> None:
            got[0] += len(data)
            self.left -= len(data)
            if self.left:
                return
            if time.perf_counter() < deadline:
                self.left = size
                self.transport.write(request)
            else:
                left[0] -= 1
                if not left[0]:
                    done.set()

    start = time.perf_counter()
    transports = [(await loop.create_connection(Drain, "127.0.0.1", port))[0]
                  for _ in range(streams)]
    await asyncio.wait_for(done.wait(), duration + 60)
    elapsed = time.perf_counter() - start
    for transport in transports:
        transport.close()
    return got[0] / size * tokens / elapsed


def parse_only(tokens: int, rounds: int = 20, trials: int = 5) -> float:
    """Tokens/s of the adapter's parser alone: one stream's bytes replayed from memory in
    64 KiB reads into a connection (no socket, no server sharing the CPU); the best of
    `trials` (the box is shared: the best trial is the one least disturbed)."""
    body = response(tokens)
    reads = [body[i:i + 65536] for i in range(0, len(body), 65536)]
    sut = OpenAISut.from_spec("openai://127.0.0.1:1/m")
    seen = Loop(sut, 0)
    sut._sink = seen  # type: ignore[assignment]
    pool = StreamPool("127.0.0.1", 1, 1)
    pool._next = lambda conn: None  # type: ignore[method-assign]
    conn = StreamConnection(pool)
    conn.transport = _NoTransport()  # type: ignore[assignment]
    prompt = _Prompts(tokens).prompt(0)
    best = 0.0
    for _ in range(trials):
        seen.tokens = 0
        start = time.perf_counter()
        for _ in range(rounds):
            seen.open += 1
            conn.send(Exchange(sut, 0, prompt), b"")
            for data in reads:
                conn.data_received(data)
        best = max(best, seen.tokens / (time.perf_counter() - start))
    return best


class _NoTransport:
    def write(self, data: bytes) -> None:
        pass

    def is_closing(self) -> bool:
        return False


async def peers(port: int, streams: int, tokens: int, duration: float) -> float:
    """Tokens/s of an aiohttp line loop, as benchmark clients write it."""
    import aiohttp

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True,
            "max_tokens": tokens, "stream_options": {"include_usage": True}}
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    counted = [0]
    deadline = time.perf_counter() + duration

    async def worker(session: aiohttp.ClientSession) -> None:
        while time.perf_counter() < deadline:
            stamps: list[int] = []
            async with session.post(url, json=body) as resp:
                async for raw in resp.content:
                    line = raw.strip()
                    if not line.startswith(b"data: "):
                        continue
                    data = line[6:]
                    if data == b"[DONE]":
                        break
                    chunk = json.loads(data)
                    if chunk.get("choices") and chunk["choices"][0]["delta"].get("content"):
                        stamps.append(time.perf_counter_ns())
            counted[0] += len(stamps)

    connector = aiohttp.TCPConnector(limit=streams)
    async with aiohttp.ClientSession(connector=connector) as session:
        start = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(streams)))
        return counted[0] / (time.perf_counter() - start)


class _Prompts:
    def __init__(self, tokens: int) -> None:
        self._prompt = Prompt("hi", 1, tokens)

    def prompt(self, index: int) -> Prompt:
        return self._prompt


class LagCounter(ChunkCounter):
    """Counts one token per chunk (remembering none, so every chunk comes here, in the order
    the adapter parses them), noting its server stamp and when the parser met it."""

    def __init__(self) -> None:
        super().__init__("approx")
        self.sent: list[int] = []
        self.parsed: list[int] = []

    def count(self, text: bytes) -> int:
        self.parsed.append(time.perf_counter_ns())
        self.sent.append(int(text))
        return 1


class StampLoop(Loop):
    """A `Loop` that keeps every finished stream's read stamps."""

    def __init__(self, sut: OpenAISut) -> None:
        super().__init__(sut, 0)
        self.stamps: list[int] = []

    def streamed(self, query_id: int, done_ns: int, stream: TokenStream, *args: Any) -> None:
        self.stamps += stream.chunk_ns
        super().streamed(query_id, done_ns, stream, *args)


def held_p99(sent: np.ndarray, lag: np.ndarray) -> float:
    """p99 (ms) of the lags of the tokens sent in the middle 80% of the run, when every
    stream is open: the first and last 10% hold the streams' starts and ends, which here
    all fall within one period (every stream issued at once), unlike a run's arrivals."""
    first, last = sent.min(), sent.max()
    middle = (sent >= first + (last - first) // 10) & (sent <= last - (last - first) // 10)
    return float(np.percentile(lag[middle], 99)) / 1e6


Stamps = tuple[np.ndarray, np.ndarray, np.ndarray, int]
"""Server stamps, read stamps and parse stamps of every token (paired), streams failed."""


async def lag_stamps(port: int, streams: int, tokens: int,
                     barrier: Any = None) -> Stamps:
    """`streams` paced streams held at once (issued together, after `barrier` when given).
    The adapter parses chunks in the order of its reads, each read stamped first, so its
    read stamps sorted are the stamps of the chunks in parse order: paired with the server
    stamps the counter saw in that order."""
    sut = OpenAISut.from_spec(f"openai://127.0.0.1:{port}/m?max_in_flight={streams}")
    sut.use_prompts(_Prompts(tokens))
    counter = sut.counter = LagCounter()
    loop = StampLoop(sut)
    await sut.start(loop, None)  # type: ignore[arg-type]
    if barrier is not None:
        await asyncio.to_thread(barrier.wait, 60)
    for _ in range(streams):
        loop.issue()
    await asyncio.wait_for(loop.all_done.wait(), 120)
    await sut.stop()
    sent = np.array(counter.sent)
    read = np.sort(np.array(loop.stamps))
    assert len(read) == len(sent), "every token parsed is in a finished stream"
    assert (read >= sent).all(), "a read stamp before its send: the pairing or the clock is off"
    return sent, read, np.array(counter.parsed), loop.errors


def lag_figures(stamps: Stamps) -> tuple[float, float, float, int]:
    """(p99 read-stamp lag while every stream is open, the same over the whole run, p99
    parse lag while every stream is open, in ms; streams that failed)."""
    sent, read, parsed, errors = stamps
    whole = float(np.percentile(read - sent, 99)) / 1e6
    return held_p99(sent, read - sent), whole, held_p99(sent, parsed - sent), errors


async def lag_p99(port: int, streams: int, tokens: int) -> tuple[float, float, float, int]:
    """`lag_figures` of `streams` paced streams from this process."""
    return lag_figures(await lag_stamps(port, streams, tokens))


def _lag_worker(port: int, streams: int, tokens: int, barrier: Any, out: Any) -> None:
    """One client process of `lag_over_workers`: its streams' stamps, on `out`."""
    out.send(run_loop(lag_stamps(port, streams, tokens, barrier)))
    out.close()


def lag_over_workers(port: int, streams: int, tokens: int,
                     workers: int) -> tuple[float, float, float, int]:
    """`lag_figures` of `streams` paced streams spread over `workers` client processes
    (spawned, released together at a barrier once each has its adapter up), pooled."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(workers)
    shares = [streams // workers + (i < streams % workers) for i in range(workers)]
    pipes = [ctx.Pipe(duplex=False) for _ in shares]
    procs = [ctx.Process(target=_lag_worker, args=(port, n, tokens, barrier, w), daemon=True)
             for n, (_, w) in zip(shares, pipes, strict=True)]
    for p in procs:
        p.start()
    try:
        parts = [r.recv() if r.poll(180) else None for r, _ in pipes]
    finally:
        for p in procs:
            p.join(10)
            if p.is_alive():
                p.terminate()
                p.join()
    if any(part is None for part in parts):
        raise RuntimeError("a client process sent nothing within 180 s")
    return lag_figures((np.concatenate([p[0] for p in parts]),
                        np.concatenate([p[1] for p in parts]),
                        np.concatenate([p[2] for p in parts]), sum(p[3] for p in parts)))


def spread_lag(a: argparse.Namespace) -> None:
    """`--workers N`: the lag of `--lag-streams` streams from 1 process and from N."""
    print(f"read-stamp lag, {a.lag_streams} streams of {a.paced_tokens} tokens, one every "
          f"{a.period_ms:g} ms, p99 in ms while every stream is open, median of "
          f"{a.lag_trials} runs ({os.cpu_count()} cores):")
    for workers in sorted({1, a.workers}):
        runs = []
        for _ in range(a.lag_trials):
            with Server(a.paced_tokens, period_ms=a.period_ms) as server:
                time.sleep(0.5)
                runs.append(lag_over_workers(server.port, a.lag_streams, a.paced_tokens,
                                             workers) if workers > 1
                            else run_loop(lag_p99(server.port, a.lag_streams,
                                                  a.paced_tokens)))
        p99 = float(np.median([r[0] for r in runs]))
        whole = float(np.median([r[1] for r in runs]))
        print(f"  {workers:3d} process{'es' if workers > 1 else '  '}: p99 {p99:7.3f} (runs "
              + " ".join(f"{r[0]:.3f}" for r in runs)
              + f"; whole run {whole:7.3f}), {sum(r[3] for r in runs)} failed", flush=True)


async def lag_floor(port: int, streams: int, tokens: int) -> float:
    """p99 lag (ms) of a bare asyncio Protocol that only stamps each read and regex-reads the
    stamps in it: what this machine allows, before any parsing of ours. Its streams start as
    loadgen's do, every connection opened and then every request written at once (sending
    each request as its connection opens, one by one, gives a lower tail at 1,000 streams:
    the start pattern, not the client, makes that difference)."""
    loop = asyncio.get_running_loop()
    sent: list[int] = []
    lags: list[int] = []
    done = asyncio.Event()
    left = [streams]
    stamp = __import__("re").compile(rb'"content":" (\d+)"')
    request = OpenAISut.from_spec(f"openai://127.0.0.1:{port}/m").request(
        _Prompts(tokens).prompt(0))

    class Bare(asyncio.Protocol):

        def data_received(self, data: bytes) -> None:
            now = time.perf_counter_ns()
            stamps = list(map(int, stamp.findall(data)))
            sent.extend(stamps)
            lags.extend(now - s for s in stamps)
            if b"[DONE]" in data:
                left[0] -= 1
                if not left[0]:
                    done.set()

    opened = await asyncio.gather(*(loop.create_connection(Bare, "127.0.0.1", port)
                                    for _ in range(streams)))
    for transport, _ in opened:
        transport.write(request)
    await asyncio.wait_for(done.wait(), 120)
    for transport, _ in opened:
        transport.close()
    return held_p99(np.array(sent), np.array(lags))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--burst", type=int, default=1 << 20, help="bytes per server write")
    parser.add_argument("--period-ms", type=float, default=50.0)
    parser.add_argument("--paced-tokens", type=int, default=40)
    parser.add_argument("--start-streams", type=int, default=125)
    parser.add_argument("--max-streams", type=int, default=4000)
    parser.add_argument("--lag-trials", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None,
                        help="only the lag of --lag-streams streams over N client processes")
    parser.add_argument("--lag-streams", type=int, default=1000)
    a = parser.parse_args()
    clock = time.get_clock_info("perf_counter").implementation
    if "CLOCK_MONOTONIC" not in clock:
        raise SystemExit(f"perf_counter is {clock}, not CLOCK_MONOTONIC: the server's stamps "
                         "cannot be compared with the client's")
    if a.workers is not None:
        spread_lag(a)
        return

    with Server(a.tokens, a.burst) as server:
        time.sleep(0.5)
        pushed = run_loop(drain(server.port, a.streams, a.tokens, a.duration))
        pid = server.proc.pid
        assert pid is not None
        server_cpu, start = cpu_seconds(pid), time.perf_counter()
        mine = run_loop(ours(server.port, a.streams, a.tokens, a.duration))
        server_busy = (cpu_seconds(pid) - server_cpu) / (time.perf_counter() - start)
        theirs = run_loop(peers(server.port, a.streams, a.tokens, a.duration))
    alone = parse_only(a.tokens)
    print(f"parse, one process, {a.streams} streams x {a.tokens} tokens, one token per chunk "
          f"(server process on the same {os.cpu_count()}-core box):")
    print(f"  server alone           {pushed:12,.0f} tokens/s   (a client that only counts "
          "bytes: the most any client can get here)")
    print(f"  loadgen openai://      {mine:12,.0f} tokens/s   ({mine / pushed:.0%} of the server "
          f"alone; the server process used {server_busy:.0%} of a core meanwhile)")
    print(f"  aiohttp line loop      {theirs:12,.0f} tokens/s")
    print(f"  ratio                  {mine / theirs:12.1f}x")
    print(f"  loadgen parser alone   {alone:12,.0f} tokens/s   (bytes replayed from memory, "
          "no server, best of 5)")

    print(f"read-stamp lag, one token every {a.period_ms:g} ms per stream, p99 in ms, median "
          f"of {a.lag_trials} runs:\n"
          "  the client's read stamp (loadgen: the one its TokenStream keeps, taken first thing "
          "in data_received;\n  bare: the same in a Protocol that does nothing else) less the "
          "server's perf_counter_ns just before\n  the write; both processes read perf_counter_ns "
          f"from the host's {clock}, so the difference is a\n  true lag. Tokens sent while "
          "every stream is open (the middle 80% of the run; 'whole run': all, with the\n  "
          "streams' starts and ends, here all within one period). 'parsed': when loadgen's "
          "parser met the token, less the same server stamp.")
    held = floor_held = 0
    streams = a.start_streams
    while streams <= a.max_streams:
        ours_runs, floor_runs = [], []
        for _ in range(a.lag_trials):
            with Server(a.paced_tokens, period_ms=a.period_ms) as server:
                time.sleep(0.5)
                ours_runs.append(run_loop(lag_p99(server.port, streams, a.paced_tokens)))
            with Server(a.paced_tokens, period_ms=a.period_ms) as server:
                time.sleep(0.5)
                floor_runs.append(run_loop(lag_floor(server.port, streams, a.paced_tokens)))
        p99 = float(np.median([r[0] for r in ours_runs]))
        whole = float(np.median([r[1] for r in ours_runs]))
        parsed = float(np.median([r[2] for r in ours_runs]))
        errors = sum(r[3] for r in ours_runs)
        floor = float(np.median(floor_runs))
        runs = " ".join(f"{r[0]:.3f}" for r in ours_runs)
        print(f"  {streams:6d} streams: loadgen {p99:7.3f} (runs {runs}; parsed {parsed:7.3f}; "
              f"whole run {whole:7.3f}), bare protocol {floor:7.3f}, {errors} failed")
        if p99 < 1.0 and not errors:
            held = streams
        if floor < 1.0:
            floor_held = streams
        if p99 >= 1.0 and floor >= 1.0:
            break
        streams *= 2
    print(f"  streams held with p99 lag < 1 ms: loadgen {held}, bare protocol {floor_held}")


if __name__ == "__main__":
    main()
