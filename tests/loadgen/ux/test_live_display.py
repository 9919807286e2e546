"""The live display: `loadgen run` in a pseudo-terminal draws the bar with percent, ETA and
p99 against the SLO; in a pipe it prints plain lines with the same figures; and the
display renders the figures of one progress report."""

from __future__ import annotations

import io
import os
import pty
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from loadgen.live.display import LiveDisplay, progress_view
from loadgen.live.progress import ProgressLines
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import settings_from_mapping
from loadgen.record.glance import Glance
from loadgen.record.progress import Progress

ROOT = Path(__file__).resolve().parents[3]
S = 1_000_000_000
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")
RUN = [sys.executable, "-m", "loadgen", "run", str(ROOT / "scenarios" / "server.toml"),
       "--sut", "sim:service=const:1ms", "--set", "preset='dev'", "--set", "min_duration_s=3",
       "--set", "target_latency_ms=20"]


def _plan() -> RunPlan:
    return RunPlan.of(settings_from_mapping({"preset": "dev", "target_qps": 100,
                                             "target_latency_ms": 50}))


def _text(display: LiveDisplay, p: Progress) -> str:
    out = io.StringIO()
    Console(file=out, width=120, force_terminal=False).print(display.render(p))
    return " ".join(out.getvalue().split())  # one line, single spaces


def test_the_display_shows_percent_eta_rate_latency_against_the_slo_and_errors() -> None:
    display = LiveDisplay(_plan())
    g = Glance(1_200_000, 61_000_000, 0.981, 45_000, (("timeout", 2), ("protocol_error", 1)))
    text = _text(display, Progress(2 * S, 200, 198, 2, 3, g))
    assert " 40.0% ETA 0:03" in text and "rate 99 QPS done issued 200 done 198" in text
    assert "p50 1.2 ms p99 61 ms vs SLO 50 ms within SLO 98.10%" in text
    assert "issue lag p99 45 us (limit 2 ms)" in text
    assert "errors 3: timeout 2, protocol_error 1" in text


def test_before_any_latency_the_display_says_so() -> None:
    text = _text(LiveDisplay(_plan()), Progress(S // 4, 25, 0, 25, 0, Glance(None, None, None,
                                                                             None)))
    assert "p99 ? vs SLO 50 ms" in text and "errors 0" in text


def test_plain_lines_come_every_2_s_with_the_same_figures() -> None:
    out = io.StringIO()
    lines = ProgressLines(_plan(), out)
    g = Glance(1_200_000, 61_000_000, 0.981, 45_000, (("timeout", 2),))
    for quarter in range(1, 19):  # reports every 250 ms for 4.5 s
        lines(Progress(quarter * S // 4, 25 * quarter, 25 * quarter, 0, 2, g))
    printed = out.getvalue().splitlines()
    assert [line[:10] for line in printed] == ["[    2.0s]", "[    4.0s]"]
    assert printed[0].endswith("p50 1.2 ms  p99 61 ms (SLO 50 ms)  lag p99 45 us")
    assert " 40.0%  ETA 0:03  issued 200" in printed[0]


def test_off_a_terminal_the_view_is_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    assert isinstance(progress_view(_plan()), ProgressLines)  # pytest's stderr is no tty
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert isinstance(progress_view(_plan()), LiveDisplay)
    monkeypatch.setenv("TERM", "dumb")
    assert isinstance(progress_view(_plan()), ProgressLines)


def _run_in_pty(out: Path, timeout_s: float = 120) -> tuple[int, str]:
    """`loadgen run` with a pseudo-terminal as its stdin, stdout and stderr; what it drew."""
    main, child = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "120", "LINES": "40"}
    proc = subprocess.Popen([*RUN, "--out", str(out)], stdin=child, stdout=child, stderr=child,
                            cwd=ROOT, env=env, start_new_session=True)
    os.close(child)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        with selectors.DefaultSelector() as selector:
            selector.register(main, selectors.EVENT_READ)
            while time.monotonic() < deadline:
                if not selector.select(min(1.0, deadline - time.monotonic())):
                    continue
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # EIO: the child side closed
                    break
                if not chunk:
                    break
                chunks.append(chunk)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        os.close(main)
    return code, ANSI.sub("", b"".join(chunks).decode("utf-8", "replace"))


@pytest.mark.functional
def test_loadgen_run_in_a_terminal_draws_the_live_display(tmp_path: Path) -> None:
    code, text = _run_in_pty(tmp_path)
    assert code in (0, 1), text
    assert "plan: Server at 200 QPS, at least 100 queries and 3 s" in text
    assert "━" in text  # the bar
    percents = [float(x) for x in re.findall(r"(\d+\.\d)% ", text)]
    assert percents and max(percents) > 0, text
    assert re.search(r"ETA \d+:\d\d", text), text
    assert re.search(r"p99 [\d.]+ ms vs SLO 20 ms", text), text
    assert "issue lag" in text and "errors" in text
    assert not re.search(r"^\[ *\d+\.\ds\]", text, re.MULTILINE)  # no plain lines on a terminal
    assert (tmp_path / "report.html").is_file()


@pytest.mark.functional
def test_loadgen_run_in_a_pipe_prints_plain_lines_with_the_same_figures(tmp_path: Path) -> None:
    run = subprocess.run([*RUN, "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=120, check=False, cwd=ROOT)
    assert run.returncode in (0, 1), run.stderr
    assert "\x1b[" not in run.stderr  # no terminal control in a pipe
    lines = [line for line in run.stderr.splitlines() if line.startswith("[")]
    assert lines, run.stderr
    for line in lines:
        assert re.search(r"\] +\d+\.\d%  ETA \d+:\d\d  issued \d+", line), line
    assert any(re.search(r"p99 [\d.]+ ms \(SLO 20 ms\)  lag p99 ", line) for line in lines)
