"""Every `loadgen` command in README.md and docs/guide.md runs, with a short preset, and
exits as documented.

The commands are read from the documents' shell blocks (continuation lines joined,
comments dropped) and run in order, one block after another, in a scratch directory per
document holding `scenarios/` and two runs `runs/a`, `runs/b` (so `runs/...` paths and
`report`/`compare` of earlier outputs work as a reader of that document would run them).
Each runs through the CLI's entry point in this process, its exit code as `loadgen` would
return it (the test is about the commands, not the interpreter start, which `loadgen
--version` in a subprocess still checks once).
Optional parts (`[--budget-s 600]`) are left out. Each gets the short preset: `--set preset='dev'` with a 1 s minimum and few queries;
a sweep keeps the first value of each `--grid` and one launch; a find-peak gets a budget.
A `loadgen serve ... &` in a block is started (ports 0) and the block's 127.0.0.1:8000/8001
point at it; blocks that document the same `loadgen serve` command share one server,
started once for the module and stopped by pid at its end. Skipped, and listed: synopses (FILE, SPEC,
MODEL, [options]), `--ray` (a Ray cluster), and endpoints no block serves.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from loadgen.cli.main import main as cli_main
from tests.served import read_line, stop

pytestmark = [pytest.mark.functional, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
DOCS = ("README.md", "docs/guide.md")
SHORT = ["--set", "preset='dev'", "--set", "min_duration_s=0.5", "--set", "warmup_s=0",
         "--set", "min_query_count=20", "--set", "energy='off'"]
EXPECTED = {"run": (0, 1), "find-peak": (0, 1), "sweep": (0,), "report": (0,),
            "compare": (0, 4), "scenarios": (0,), "settings": (0,), "--version": (0,)}
SYNOPSIS = re.compile(r"\[|\bFILE\b|\bSPEC\b|\bMODEL\b|\bDIR\b|\bKEY\b|HEAD:|\bP\b")
OPTIONAL = re.compile(r"\s*\[[^\[\]]*\]")  # `[--budget-s 600]`: run without it
TIMEOUT_S = 240


@dataclass
class Block:
    """One shell block's loadgen commands, in order, and where it is."""

    doc: str
    commands: list[str] = field(default_factory=list)


def _blocks() -> Iterator[Block]:
    for doc in DOCS:
        inside, lang, lines = False, "", []
        for raw in (ROOT / doc).read_text().splitlines():
            if raw.startswith("```"):
                if inside and lang in ("sh", "bash", ""):
                    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
                    found = [c for line in joined.splitlines()
                             if re.match(r"(\.venv/bin/)?loadgen ",
                                         c := OPTIONAL.sub("", line.split(" #")[0]).strip())]
                    if found:
                        yield Block(doc, found)
                inside, lang, lines = not inside, raw[3:].strip(), []
            elif inside:
                lines.append(raw)


def _why_skipped(command: str, served: bool) -> str | None:
    if SYNOPSIS.search(command):
        return "a synopsis"
    if "--ray" in command:
        return "needs a Ray cluster"
    if re.search(r"(https?|grpcs?|openais?|generates?)://", command) and not served:
        return "an endpoint of yours (no `loadgen serve` in its block)"
    return None


def _short(argv: list[str]) -> list[str]:
    """The command with the short preset (see the module docstring)."""
    out, i = [], 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--grid":
            key, _, values = argv[i + 1].partition("=")
            first = values.split(",")[0].split(":")[0]
            out += [arg, f"{key}={first}"]
            i += 2
            continue
        if arg in ("--launches", "--budget-s", "--min-queries"):
            i += 2
            continue
        out.append(arg)
        i += 1
    command = out[0]
    if command in ("run", "sweep", "find-peak"):
        out += SHORT
    if command == "sweep":
        out += ["--launches", "1"]
    if command == "find-peak":
        out += ["--budget-s", "10", "--min-queries", "50", "--repeats", "1",
                "--tolerance", "0.5"]
    return out


@dataclass
class Server:
    proc: subprocess.Popen[str]
    ports: dict[str, str]  # documented host:port -> the served one


def _serve(argv: list[str], cwd: Path) -> Server:
    """Start a documented `loadgen serve` on free ports; map its documented ports."""
    documented = {flag: argv[argv.index(flag) + 1] for flag in ("--http-port", "--grpc-port")
                  if flag in argv}
    free = [a for a in argv]
    for flag in documented:
        free[free.index(flag) + 1] = "0"
    proc = subprocess.Popen([sys.executable, "-m", "loadgen", *free], cwd=cwd,
                            stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        banner = read_line(proc, 120)
        assert banner.startswith("serving "), banner
        assert read_line(proc, 120).startswith("ready "), "the model never became ready"
    except BaseException:  # stopped by pid here: the caller never gets it
        stop(proc, 30)
        assert proc.stdout is not None
        proc.stdout.close()
        raise
    bound = dict(re.findall(r"(http|grpc)=(\S+)", banner))
    ports = {f"127.0.0.1:{documented[f'--{kind}-port']}": where
             for kind, where in bound.items() if f"--{kind}-port" in documented}
    return Server(proc, ports)


def _loadgen(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """`loadgen ARGV` through the CLI's entry point in this process: its exit code (argparse's
    exits included) and what it printed on stderr."""
    try:
        code = cli_main(argv)
    except SystemExit as exc:  # `--version`, and argparse's refusals (2)
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return code, capsys.readouterr().err


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[tuple[str, ...], Server]]:
    """The documents' `loadgen serve`s by command line, started by the first block that
    documents each; every one stopped by pid when the module is done."""
    started: dict[tuple[str, ...], Server] = {}
    try:
        yield started
    finally:
        for server in started.values():
            stop(server.proc, 30)
            assert server.proc.stdout is not None
            server.proc.stdout.close()


def _commands() -> list[tuple[str, list[str]]]:
    return [(b.doc, b.commands) for b in _blocks()]


def test_the_documents_hold_runnable_commands() -> None:
    runnable = [c for _, block in _commands() for c in block
                if _why_skipped(c, "loadgen serve" in " ".join(block)) is None]
    assert len(runnable) >= 15, runnable


def test_the_console_entry_point_runs_in_its_own_interpreter() -> None:
    done = subprocess.run([sys.executable, "-m", "loadgen", "--version"], capture_output=True,
                          text=True, timeout=TIMEOUT_S, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and done.stdout.startswith("loadgen "), done


def _scratch(root: Path, capsys: pytest.CaptureFixture[str],
             monkeypatch: pytest.MonkeyPatch) -> Path:
    """The scratch directory, made the working one (until the test ends)."""
    root.mkdir()
    (root / "scenarios").symlink_to(ROOT / "scenarios")
    monkeypatch.chdir(root)
    for name in ("a", "b"):  # what the documented `compare runs/a runs/b` reads
        code, err = _loadgen(["run", "--sut", "null", "--quiet", "--out", f"runs/{name}", *SHORT],
                             capsys)
        assert code in (0, 1), err
    return root


@pytest.mark.timeout(900)  # some 20 commands and a model server: a busy host needs more than 300 s
@pytest.mark.parametrize("document", DOCS)
def test_every_documented_command_runs(document: str, tmp_path: Path,
                                       servers: dict[tuple[str, ...], Server],
                                       capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    tmp_path = _scratch(tmp_path / "scratch", capsys, monkeypatch)
    ran, skipped, failed = [], [], []
    for doc, block in (c for c in _commands() if c[0] == document):
        served: list[Server] = []
        for command in block:
            why = _why_skipped(command, any(served) or any(
                c.startswith("loadgen serve") for c in block))
            if why:
                skipped.append(f"{doc}: {command} ({why})")
                continue
            argv = shlex.split(command.removesuffix("&").strip())[1:]
            if argv[0] == "serve":
                if tuple(argv) not in servers:
                    servers[tuple(argv)] = _serve(argv, tmp_path)
                served.append(servers[tuple(argv)])
                continue
            argv = _short(argv)
            for server in served:
                argv = [_replace(a, server.ports) for a in argv]
            start = time.monotonic()
            code, err = _loadgen(argv, capsys)
            ran.append(f"{time.monotonic() - start:5.1f} s  {command}")
            if code not in EXPECTED[argv[0]]:
                failed.append(f"{doc}: {command} -> exit {code}: {err.strip()[-600:]}")
    print("skipped:\n  " + "\n  ".join(skipped) + "\nran:\n  " + "\n  ".join(ran))
    assert not failed, "\n".join(failed)
    assert len(ran) >= (12 if document == "README.md" else 6), ran


def _replace(arg: str, ports: dict[str, str]) -> str:
    for documented, bound in ports.items():
        arg = arg.replace(documented, bound)
    return arg
