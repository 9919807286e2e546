"""HTTP client throughput: loadgen's OIP adapter against wrk and Locust, same server, same run.

A minimal Open Inference Protocol server (an asyncio Protocol on uvloop answering one fixed
inference response, in `--server-procs` processes sharing the port) is driven with the same
number of keep-alive connections by:

* loadgen, through the engine: Offline (one query of many single-sample requests: the
  adapter's own throughput) and Server closed loop with `concurrency` = connections (one
  engine query per request);
* wrk (one thread, the adapter's exact request bytes), if installed;
* Locust's FastHttpUser (headless, `connections` users, no wait), if installed.

Each tool runs `--rounds` times, interleaved; it prints the median requests/s with the range,
and the ratios of the medians; no pass/fail.

    .venv/bin/python benchmarks/http_client.py [--connections 64] [--duration 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import csv
import multiprocessing
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loadgen.adapters.http import HttpSut
from loadgen.api import run_async, run_loop
from loadgen.plan.settings import load_settings

MODEL = "bench"
_INFER_HEADER = (b'{"model_name":"bench","model_version":"1","outputs":[{"name":"y","datatype":'
                 b'"FP32","shape":[1,4],"parameters":{"binary_data_size":16}}],"parameters":'
                 b'{"queue_ns":1000,"batch_formation_ns":0,"compute_ns":2000,'
                 b'"server_total_ns":5000,"batch_size":1}}')
_METADATA = (b'{"name":"bench","versions":["1"],"platform":"bench","inputs":[{"name":"x",'
             b'"datatype":"FP32","shape":[-1,4]}],"outputs":[{"name":"y","datatype":"FP32",'
             b'"shape":[-1,4]}]}')


def _response(body: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + extra
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def serve(sock: socket.socket) -> None:
    """One server process: answer every request on `sock` from canned responses."""
    import asyncio

    import uvloop

    infer = _response(_INFER_HEADER + bytes(16),
                      b"Inference-Header-Content-Length: %d\r\n" % len(_INFER_HEADER))
    metadata, empty = _response(_METADATA), _response(b"")

    class Server(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport
            self.buf = b""

        def data_received(self, data: bytes) -> None:
            buf, out = self.buf + data, []
            while (end := buf.find(b"\r\n\r\n")) >= 0:
                i = buf.find(b"\r\nContent-Length:", 0, end)  # not Inference-Header-...
                total = end + 4 + (int(buf[i + 17:buf.find(b"\r\n", i + 2, end + 2)]) if i >= 0
                                   else 0)
                if len(buf) < total:
                    break
                out.append(infer if buf.startswith(b"POST") else metadata
                           if buf.startswith(b"GET /v2/models/bench ") else empty)
                buf = buf[total:]
            self.buf = buf
            if out:
                self.transport.write(b"".join(out))  # type: ignore[attr-defined]

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Server, sock=sock, backlog=1024)
        await server.serve_forever()

    uvloop.run(main())


def loadgen_offline(url: str, connections: int, duration: int, rate: float) -> float:
    """Offline sized to take about `duration` s at `rate` samples/s."""
    settings = load_settings(None, ["preset='dev'", "scenario='Offline'", f"target_qps={rate}",
                                    f"min_duration_s={duration}", "min_query_count=1"])
    sut = HttpSut.from_spec(f"{url}?connections={connections}&batch=1")
    return float(run_loop(run_async(settings, sut)).stats.samples_per_s)


def loadgen_closed(url: str, connections: int, duration: int) -> float:
    settings = load_settings(None, [
        "preset='dev'", "scenario='Server'", "arrival='closed'", f"concurrency={connections}",
        "target_latency_ms=1000", f"min_duration_s={duration}", "min_query_count=1000"])
    sut = HttpSut.from_spec(f"{url}?connections={connections}")
    return float(run_loop(run_async(settings, sut)).stats.qps_completed)


def wrk(url: str, connections: int, duration: int, request: bytes) -> float | None:
    if shutil.which("wrk") is None:
        return None
    head, _, body = request.partition(b"\r\n\r\n")
    headers = [line.split(b": ", 1) for line in head.split(b"\r\n")[1:]
               if not line.lower().startswith((b"host:", b"content-length:"))]
    lua = "".join(f"\\{b}" for b in body)
    script = ['wrk.method = "POST"', f'wrk.body = "{lua}"'] + [
        f'wrk.headers["{k.decode()}"] = "{v.decode()}"' for k, v in headers]
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write("\n".join(script))
    try:
        target = url.replace(f"/{MODEL}", f"/v2/models/{MODEL}/infer")
        out = subprocess.run(["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "-s", f.name,
                              target], capture_output=True, text=True, timeout=duration + 30,
                             check=False).stdout
    finally:
        os.unlink(f.name)
    match = re.search(r"Requests/sec:\s*([\d.]+)", out)
    return float(match.group(1)) if match else None


LOCUSTFILE = """
from locust import constant, task
from locust.contrib.fasthttp import FastHttpUser

BODY = {body!r}
HEADERS = {headers!r}

class Infer(FastHttpUser):
    wait_time = constant(0)
    @task
    def infer(self):
        self.client.post("/v2/models/{model}/infer", data=BODY, headers=HEADERS)
"""


def locust(host: str, connections: int, duration: int, request: bytes) -> float | None:
    exe = Path(sys.executable).with_name("locust")
    if not exe.exists() and shutil.which("locust") is None:
        return None
    head, _, body = request.partition(b"\r\n\r\n")
    headers = dict(line.decode().split(": ", 1) for line in head.split(b"\r\n")[1:]
                   if not line.lower().startswith((b"host:", b"content-length:")))
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp) / "locustfile.py"
        file.write_text(LOCUSTFILE.format(body=body, headers=headers, model=MODEL))
        subprocess.run([str(exe) if exe.exists() else "locust", "-f", str(file), "--headless",
                        "-u", str(connections), "-r", str(connections), "-t", f"{duration}s",
                        "--host", host, "--csv", f"{tmp}/out", "--only-summary",
                        "--loglevel", "ERROR"], capture_output=True, timeout=duration + 60,
                       check=False)
        stats = Path(f"{tmp}/out_stats.csv")
        if not stats.exists():
            return None
        for row in csv.DictReader(stats.open()):
            if row["Name"] == "Aggregated":
                return float(row["Requests/s"])
    return None


class _Discard:
    def done(self, *args: Any) -> None:
        pass

    def failed(self, *args: Any) -> None:
        pass


async def sample_request(url: str) -> bytes:
    """The adapter's own request bytes for sample 0, so every tool sends the same."""
    sut = HttpSut.from_spec(f"{url}?connections=1")
    await sut.start(_Discard(), None)  # type: ignore[arg-type]
    try:
        return sut.request_of(0)
    finally:
        await sut.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--duration", type=int, default=3)
    parser.add_argument("--server-procs", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    sock = socket.create_server(("127.0.0.1", 0), reuse_port=True)
    host = f"http://127.0.0.1:{sock.getsockname()[1]}"
    url = f"{host}/{MODEL}"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=serve, args=(sock,), daemon=True)
             for _ in range(args.server_procs)]
    for proc in procs:
        proc.start()
    rounds: dict[str, list[float]] = {}
    try:
        time.sleep(0.5)
        request = run_loop(sample_request(url))
        c, d = args.connections, args.duration
        print(f"server: {args.server_procs} process(es); {c} connections; {d} s per tool; "
              f"{args.rounds} rounds, tools interleaved; {os.cpu_count()} CPUs; "
              f"load average {os.getloadavg()[0]:.1f}")
        for _ in range(args.rounds):
            closed = loadgen_closed(url, c, d)
            figures = {"closed": closed, "offline": loadgen_offline(url, c, d, closed),
                       "wrk": wrk(url, c, d, request), "locust": locust(host, c, d, request)}
            for name, value in figures.items():
                if value is not None:
                    rounds.setdefault(name, []).append(value)
    finally:
        for proc in procs:
            proc.terminate()
            proc.join(5)
    report(rounds, c)


def report(rounds: dict[str, list[float]], connections: int) -> None:
    """Median (min-max) of each tool, and loadgen's ratios to wrk and Locust."""
    labels = {"offline": "loadgen Offline (adapter throughput)",
              "closed": f"loadgen Server closed loop, c={connections}",
              "wrk": "wrk -t1", "locust": "Locust FastHttpUser"}
    median = {name: statistics.median(values) for name, values in rounds.items()}
    for name, label in labels.items():
        if name not in rounds:
            print(f"{label:38s} not installed (or no result)")
            continue
        values = rounds[name]
        print(f"{label:38s} {median[name]:9.0f} req/s  ({min(values):.0f}-{max(values):.0f})")
    for base in ("wrk", "locust"):
        if base in median:
            print(f"loadgen/{base}: Offline {median['offline'] / median[base]:.2f}x, "
                  f"closed loop {median['closed'] / median[base]:.2f}x")

if __name__ == "__main__":
    main()
