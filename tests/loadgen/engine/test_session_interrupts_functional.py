"""SIGTERM stops a run as Ctrl-C does (a partial result marked interrupted), and a second
signal stops the drain against a stalled SUT instead of waiting out `drain_timeout_s`."""

from __future__ import annotations

import json
import selectors
import signal
import subprocess
import time
from pathlib import Path

import pytest

from loadgen.engine.runner import ABANDONED
from tests.runs import interrupted_run, start_run, wait_running

pytestmark = pytest.mark.functional

FAST = ("target_qps=500",)  # queries come fast: the log holds rows soon


def _start(out: Path, sut: str, *settings: str) -> subprocess.Popen[str]:
    return start_run(out, sut, *FAST, *settings, quiet=True)


def _said(proc: subprocess.Popen[str], words: str, timeout_s: float) -> None:
    """Read the run's stderr until a line holds `words` (AssertionError after `timeout_s`)."""
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stderr, selectors.EVENT_READ)
        while (left := deadline - time.monotonic()) > 0 and selector.select(left):
            line = proc.stderr.readline()
            if not line or words in line:
                assert line, "the run ended first"
                return
    raise AssertionError(f"no line saying {words!r} within {timeout_s} s")


def test_sigterm_writes_a_partial_result_marked_interrupted(tmp_path: Path) -> None:
    result, _ = interrupted_run(tmp_path, "sim:service=const:200us", signal.SIGTERM, *FAST,
                                quiet=True)
    assert result["interrupted"] is True and result["reason_codes"][0] == "interrupted"
    assert result["queries"] > 0 and (tmp_path / "summary.txt").stat().st_size > 0


def test_a_second_interrupt_stops_the_drain_of_a_stalled_sut(tmp_path: Path) -> None:
    # the sim stalls 1 s after its start, so before the query log's first flush (2 s after the
    # run's start), which `wait_running` waits for: the interrupt always finds it stalled; a
    # busy host can take 0.2 s to the first query, and 500 QPS leaves rows answered by 1 s
    proc = _start(tmp_path, "sim:service=const:200us,stall_after_s=1", "drain_timeout_s=900")
    try:
        wait_running(proc, tmp_path)
        began = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _said(proc, "interrupt again", 120)  # the first one is taken: it drains
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=240)
        took = time.monotonic() - began
    finally:
        proc.kill()
        proc.wait(10)
    assert proc.returncode == 1, err
    assert took < 480  # not the 900 s drain (the waits' bounds leave room for a busy host)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["interrupted"] is True and result["unfinished"] > 0
    assert ABANDONED in json.dumps(result["errors_detail"])
