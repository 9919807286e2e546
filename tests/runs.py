"""`loadgen run` as a subprocess for functional tests that interrupt it: start a long dev run
against a SUT, wait (bounded) until it is under way, interrupt it and read its result."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["interrupted_run", "start_run", "wait_running"]


def start_run(out: Path, sut: str, *settings: str, quiet: bool = False) -> subprocess.Popen[str]:
    """`loadgen run scenarios/server.toml` on `sut` into `out`: dev preset, 60 s long (so it
    is still running when the test interrupts it), `settings` (`key=value`) on top."""
    return subprocess.Popen(
        [sys.executable, "-m", "loadgen", "run", "scenarios/server.toml", "--sut", sut,
         "--out", str(out), *(["--quiet"] if quiet else []), "--set", "preset='dev'",
         "--set", "min_duration_s=60", *(a for s in settings for a in ("--set", s))],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_running(proc: subprocess.Popen[str], out: Path, timeout_s: float = 120) -> None:
    """Wait (`timeout_s` at most: an interpreter start on a busy host can take a minute) until
    the run's query log holds rows: it is under way."""
    log = out / "queries.bin"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None \
            and (not log.exists() or log.stat().st_size == 0):
        time.sleep(0.05)  # polling for the run to get going, not synchronising with it
    assert proc.poll() is None and log.exists() and log.stat().st_size > 0


def interrupted_run(out: Path, sut: str, signum: signal.Signals, *settings: str,
                    quiet: bool = False) -> tuple[dict[str, Any], str]:
    """A run (`start_run`) sent `signum` once under way: its result.json, checked to have
    exited 1 within 120 s (a failsafe for a busy host), and what it printed on stdout. Killed by pid whatever happens."""
    proc = start_run(out, sut, *settings, quiet=quiet)
    try:
        wait_running(proc, out)
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.returncode == 1, stderr
    result: dict[str, Any] = json.loads((out / "result.json").read_text())
    return result, stdout
