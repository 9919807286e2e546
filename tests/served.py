"""Servers as subprocesses for functional tests: `loadgen serve`, and our scripted or
third-party test servers that print `port=N`; free loopback ports, stopped by pid."""

from __future__ import annotations

import contextlib
import os
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Served", "port_server", "read_line", "serve", "serve_tiny_llm", "stop"]

ROOT = Path(__file__).resolve().parents[1]


def read_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """The next line the process prints, or AssertionError after `timeout_s`."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            raise AssertionError("loadgen serve printed nothing in time")
    return proc.stdout.readline().strip()


def stop(proc: subprocess.Popen[Any], grace_s: float,
         signum: signal.Signals = signal.SIGTERM) -> int | None:
    """Stop a child by its pid: `signum`, then SIGKILL if it has not exited within
    `grace_s`; its exit code, or None when it had to be killed."""
    code = proc.poll()
    if code is None:
        os.kill(proc.pid, signum)
        try:
            code = proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
    return code


@contextlib.contextmanager
def port_server(module: str, *args: str) -> Iterator[int]:
    """`python -m MODULE --lifetime-s 120 ARGS` (a test server that prints `port=N` once it
    listens): its port; the process lives at most 120 s and is stopped by pid."""
    proc = subprocess.Popen([sys.executable, "-m", module, "--lifetime-s", "120", *args],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        line = read_line(proc, 30)
        assert line.startswith("port="), line
        yield int(line.removeprefix("port="))
    finally:
        stop(proc, 10)
        proc.stdout.close()


@dataclass(frozen=True, slots=True)
class Served:
    """A running `loadgen serve`: its process and its HTTP and gRPC host:port."""

    proc: subprocess.Popen[str]
    http: str
    grpc: str


@contextlib.contextmanager
def serve(model: str, timeout_s: float = 120) -> Iterator[Served]:
    """`loadgen serve --model MODEL` on ports 0, once its model is ready; SIGTERM at the end
    (a kill if it has not drained within 30 s)."""
    name = model.split(",")[0]
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "serve", "--http-port", "0", "--grpc-port", "0",
         "--model", model], cwd=ROOT, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        banner = read_line(proc, timeout_s)
        assert banner.startswith(f"serving {name} http=") and " grpc=" in banner, banner
        http, grpc = banner.split("http=")[1].split()[0], banner.split("grpc=")[1].split()[0]
        assert read_line(proc, timeout_s) == f"ready {name}"
        yield Served(proc, http, grpc)
    finally:
        stop(proc, 30)
        proc.stdout.close()


@contextlib.contextmanager
def serve_tiny_llm(*args: str, grace_s: float = 60) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`loadgen serve --model tiny-llm --http-port 0 --device cpu ARGS` once ready: the process
    and its host:port; SIGTERM at the end (a kill if it has not drained within `grace_s`)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "serve", "--model", "tiny-llm", "--http-port", "0",
         "--device", "cpu", *args],
        cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        banner = read_line(proc, 120)
        assert banner.startswith("serving tiny-llm http=127.0.0.1:"), banner
        assert read_line(proc, 120) == "ready tiny-llm"
        yield proc, banner.split("http=")[1]
    finally:
        stop(proc, grace_s)
        proc.stdout.close()
