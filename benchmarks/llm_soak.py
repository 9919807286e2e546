"""Soak the LLM server with valid and hostile requests mixed; check nothing leaks or dies.

Starts `loadgen serve --model MODEL` (its token from an environment variable), then for
`--minutes` keeps `--concurrency` clients busy, each drawing the next request from a seeded mix:
valid completions, chat and OIP generate (streamed or not; each must come back 200 with every
token asked for), and hostile ones (non-finite or out-of-range sampling values, token ids
outside the vocabulary, lone surrogates, JSON nested 100,000 deep, 200,000 stop strings, a 4 MB
prompt, logprobs, a non-ASCII or wrong token: each must be a 4xx), and clients that leave mid-
stream or before a non-streamed answer. At the end it waits (bounded) for every KV block to be
free and reports the server's RSS at start, end and max (sampled each second), every count, and
whether the server is still ready. Exit 0 when every check holds, 1 otherwise.

    .venv/bin/python benchmarks/llm_soak.py [--minutes 10] [--concurrency 8] [--model tiny-llm]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository's `tests`

from tests.served import ROOT, read_line, stop

TOKEN = "soak-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
MAX_TOKENS = 16


@dataclass
class Tally:
    """What was sent and how it was answered, by kind."""

    sent: Counter[str] = field(default_factory=Counter)
    statuses: dict[str, Counter[int]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def note(self, kind: str, status: int, ok: bool, detail: str = "") -> None:
        self.sent[kind] += 1
        self.statuses.setdefault(kind, Counter())[status] += 1
        if not ok and len(self.failures) < 50:
            self.failures.append(f"{kind}: {status} {detail[:200]}")


def _valid(rng: random.Random) -> tuple[str, str, dict[str, Any], bool]:
    """A valid request: (kind, path, body, streamed)."""
    stream = rng.random() < 0.5
    common = {"max_tokens": MAX_TOKENS, "ignore_eos": True,
              "temperature": rng.choice([0, 0.7, 1e-45, 1e308])}
    choice = rng.randrange(3)
    if choice == 0:
        return ("valid_completion", "/v1/completions",
                {"prompt": f"Soak {rng.random()}", "stream": stream, **common,
                 "seed": rng.choice([None, 2**45, -(2**44)]),
                 "stream_options": {"include_usage": True} if stream else None}, stream)
    if choice == 1:
        return ("valid_chat", "/v1/chat/completions",
                {"messages": [{"role": "user", "content": f"Hi é {rng.random()}"}],
                 "stream": stream, **common,
                 "stream_options": {"include_usage": True} if stream else None}, stream)
    path = "/v2/models/{model}/generate" + ("_stream" if stream else "")
    return ("valid_generate", path, {"text_input": f"Soak {rng.random()}",
                                     "parameters": common}, stream)


HOSTILE: dict[str, tuple[str, str]] = {
    "temperature_inf": ("/v1/completions", '{"prompt": "x", "temperature": 1e999}'),
    "temperature_nan": ("/v1/completions", '{"prompt": "x", "temperature": NaN}'),
    "top_p_tiny": ("/v1/completions", '{"prompt": "x", "top_p": 1e-300}'),
    "seed_huge": ("/v1/completions", '{"prompt": "x", "temperature": 1, "seed": 1e30}'),
    "token_outside": ("/v1/completions", '{"prompt": [256, 999]}'),
    "token_negative": ("/v1/completions", '{"prompt": [256, -1]}'),
    "surrogate_prompt": ("/v1/completions", '{"prompt": "a\\ud800"}'),
    "surrogate_role": ("/v1/chat/completions",
                       '{"messages": [{"role": "\\udfff", "content": "x"}]}'),
    "surrogate_text_input": ("/v2/models/{model}/generate", '{"text_input": "\\ud800"}'),
    "generate_temperature_inf": ("/v2/models/{model}/generate",
                                 '{"text_input": "x", "parameters": {"temperature": 1e999}}'),
    "deep_json": ("/v1/completions", "[" * 100_000 + "]" * 100_000),
    "many_stops": ("/v1/completions", json.dumps({"prompt": "x", "stop": ["zq"] * 200_000})),
    "long_prompt": ("/v1/completions", json.dumps({"prompt": "p" * 4_000_000})),
    "logprobs": ("/v1/completions", '{"prompt": "x", "logprobs": 2}'),
    "echo": ("/v1/completions", '{"prompt": "x", "echo": true}'),
}
RARE = {"deep_json", "many_stops", "long_prompt"}  # big bodies: one in ten hostile draws


class Soak:
    """The clients, the tally and the RSS samples of one soak."""

    def __init__(self, url: str, model: str, seed: int) -> None:
        self.url, self.model = url, model
        self.rng = random.Random(seed)
        self.tally = Tally()

    async def one(self, session: aiohttp.ClientSession) -> None:
        draw = self.rng.random()
        if draw < 0.6:
            await self.valid(session)
        elif draw < 0.7:
            await self.leave(session, streamed=self.rng.random() < 0.5)
        elif draw < 0.75:
            await self.bad_auth(session)
        else:
            await self.hostile(session)

    async def valid(self, session: aiohttp.ClientSession) -> None:
        kind, path, body, stream = _valid(self.rng)
        async with session.post(self.url + path.format(model=self.model), json=body,
                                headers=AUTH) as resp:
            raw = await resp.read()
        ok, detail = resp.status == 200, raw.decode(errors="replace")
        if ok:
            ok = _complete(raw, stream, kind)
        self.tally.note(kind, resp.status, ok, detail)

    async def hostile(self, session: aiohttp.ClientSession) -> None:
        names = [n for n in HOSTILE if n not in RARE]
        kind = self.rng.choice(sorted(RARE)) if self.rng.random() < 0.1 else \
            self.rng.choice(names)
        path, body = HOSTILE[kind]
        async with session.post(self.url + path.format(model=self.model),
                                data=body.encode("utf-8", "surrogatepass"),
                                headers={**AUTH, "Content-Type": "application/json"}) as resp:
            raw = await resp.read()
        self.tally.note(kind, resp.status, 400 <= resp.status < 500, raw.decode("latin-1"))

    async def bad_auth(self, session: aiohttp.ClientSession) -> None:
        body = json.dumps({"prompt": "x", "max_tokens": 2}).encode()
        header = "Bearer wrong" if self.rng.random() < 0.5 else "Bearer \udce9t\udce9"
        reader, writer = await asyncio.open_connection(*_host_port(self.url))
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nAuthorization: "
                     + header.encode("utf-8", "surrogateescape")
                     + f"\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                     + body)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 30)
        writer.close()
        status = int(status_line.split()[1]) if status_line else 0
        self.tally.note("bad_auth", status, status == 401)

    async def leave(self, session: aiohttp.ClientSession, streamed: bool) -> None:
        """A client that goes away: mid-stream, or before a non-streamed answer."""
        kind = "leave_stream" if streamed else "leave_whole"
        body = {"prompt": "leave", "max_tokens": 400, "ignore_eos": True, "stream": streamed}
        try:
            async with asyncio.timeout(0.05 + self.rng.random() * 0.3):
                async with session.post(self.url + "/v1/completions", json=body,
                                        headers=AUTH) as resp:
                    async for _ in resp.content.iter_any():
                        pass
            self.tally.note(kind, resp.status, resp.status == 200)  # finished before leaving
        except TimeoutError:
            self.tally.note(kind, 0, True)


def _complete(raw: bytes, stream: bool, kind: str) -> bool:
    """Every token asked for, no in-band error."""
    if not stream:
        doc = json.loads(raw)
        return int(doc["usage"]["completion_tokens"]) == MAX_TOKENS
    events = [block[6:] for block in raw.decode().split("\n\n") if block.startswith("data: ")]
    docs = [json.loads(e) for e in events if e != "[DONE]"]
    if any("error" in d for d in docs):
        return False
    if kind == "valid_generate":
        return sum(int(d.get("output_tokens", 0)) for d in docs) == MAX_TOKENS
    return any(d.get("usage", {}).get("completion_tokens") == MAX_TOKENS for d in docs)


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def rss_mb(pid: int) -> float:
    """A process's resident set size in MB (Linux /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


async def _metric(session: aiohttp.ClientSession, url: str, name: str) -> float:
    async with session.get(url + "/metrics", headers=AUTH) as resp:
        text = await resp.text()
    match = re.search(rf"^{re.escape(name)}{{[^}}]*}} (\S+)$", text, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"/metrics has no {name}")
    return float(match.group(1))


async def soak(url: str, pid: int, model: str, minutes: float, concurrency: int,
               seed: int) -> dict[str, Any]:
    """Run the mix for `minutes`; the figures."""
    runner = Soak(url, model, seed)
    rss = [rss_mb(pid)]
    end = time.monotonic() + minutes * 60
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        async def client() -> None:
            while time.monotonic() < end:
                await runner.one(session)

        async def sampler() -> None:
            while time.monotonic() < end:
                await asyncio.sleep(1.0)  # a sampling period, not a synchronisation
                rss.append(rss_mb(pid))

        await asyncio.gather(sampler(), *(client() for _ in range(concurrency)))
        give_up = time.monotonic() + 60
        while True:
            usage = await _metric(session, url, "vllm:kv_cache_usage_perc")
            running = await _metric(session, url, "vllm:num_requests_running")
            if (usage == 0 and running == 0) or time.monotonic() > give_up:
                break
            await asyncio.sleep(0.1)  # polling the drain, bounded by give_up
        async with session.get(url + "/v2/health/ready") as resp:
            ready = resp.status
    rss.append(rss_mb(pid))
    tally = runner.tally
    valid = sum(n for k, n in tally.sent.items() if k.startswith("valid"))
    return {
        "minutes": minutes, "concurrency": concurrency, "requests": sum(tally.sent.values()),
        "valid_sent": valid, "failures": tally.failures,
        "by_kind": {k: dict(tally.statuses[k]) for k in sorted(tally.sent)},
        "kv_usage_end": usage, "running_end": running, "ready_end": ready,
        "rss_mb": {"start": round(rss[0], 1), "end": round(rss[-1], 1),
                   "max": round(max(rss), 1),
                   "after_1_min": round(rss[min(60, len(rss) - 1)], 1),
                   "each_minute": [round(v, 1) for v in rss[::60]]},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--model", default="tiny-llm", help="MODEL[,engine knobs]")
    parser.add_argument("--seed", type=int, default=29)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "SOAK_TOKEN": TOKEN,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "serve", "--http-port", "0", "--auth-token-env",
         "SOAK_TOKEN", "--model", args.model], cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env=env)
    try:
        url = "http://" + read_line(proc, 300).rsplit("http=", 1)[1]
        ready = read_line(proc, 300)
        if not ready.startswith("ready"):
            raise RuntimeError(f"the server did not get ready: {ready!r}")
        figures = asyncio.run(soak(url, proc.pid, args.model.split(",")[0], args.minutes,
                                   args.concurrency, args.seed))
    finally:
        stop(proc, 60)  # SIGTERM by pid, a kill after 60 s
        proc.stdout.close()
    figures["server_exit"] = proc.returncode
    print(json.dumps(figures, indent=1))
    checks: dict[str, Callable[[dict[str, Any]], bool]] = {
        "every request answered as it should (valid: 200 in full; hostile: 4xx)":
            lambda f: not f["failures"],
        "every KV block free at the end": lambda f: f["kv_usage_end"] == 0,
        "still ready at the end": lambda f: f["ready_end"] == 200,
        "RSS flat (end within 10% + 50 MB of the 1-minute mark)": lambda f: (
            f["rss_mb"]["end"] <= f["rss_mb"]["after_1_min"] * 1.1 + 50),
        "clean exit on SIGTERM": lambda f: f["server_exit"] == 0,
    }
    failed = [name for name, check in checks.items() if not check(figures)]
    for name in checks:
        print(f"{'FAIL' if name in failed else 'ok  '} {name}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
