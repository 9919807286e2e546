"""Agentic jobs (`session_file`): a job is a list of steps; a step is one request or several
sent together (fan-out), and it starts only when every request of the step before it has
ended (fan-in), after an optional think/tool gap.

The file is JSON (a list of jobs) or JSON lines (one job a line: a `.jsonl` file, or
text that does not open with `[`). A job is a list of steps,
or `{"name": ..., "steps": [...]}`. A step is a request, a list of requests (sent in
parallel), or `{"think_ms": ..., "requests": [...]}`. A request is `{"prompt": TEXT}` or
`{"input_tokens": N}` (synthetic text of exactly N tokens under `tokenizer`), with
`output_tokens` (required) and, on a step's lone request, `think_ms`: the gap in ms
before its step (after the previous step's last answer; before the first step, after the
job's arrival). A bad entry is refused naming the file, its line, the job, step, request
and field.

`read_jobs` builds a `JobBook`, the run's `PromptSource`: every request's prompt, by the
index its step names. The plan hands arrival i job i mod jobs (`in_order`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.errors import SettingsError
from loadgen.plan.inputfile import InputFile
from loadgen.plan.prompts import Prompt
from loadgen.plan.words import count_tokens, synthetic_text

__all__ = ["Job", "JobBook", "Step", "check_jobs", "read_jobs"]

SESSION_FILE = InputFile("session_file")
_REQUEST_KEYS = {"prompt", "input_tokens", "output_tokens", "think_ms"}
_STEP_KEYS = {"think_ms", "requests"}


@dataclass(frozen=True, slots=True)
class Step:
    """One step of a job: the gap before it, and its requests (prompt indices), sent together."""

    think_ns: int
    prompts: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Job:
    """One job: its name and its steps, in order."""

    name: str
    steps: tuple[Step, ...]


@dataclass(frozen=True, slots=True)
class JobBook:
    """The jobs of a session file and every request's prompt (a `PromptSource`)."""

    path: str
    jobs: tuple[Job, ...]
    prompts: tuple[Prompt, ...]
    tokenizer: str
    in_order: bool = True  # arrival i runs job i mod jobs

    def prompt(self, index: int) -> Prompt:
        """The prompt of one request, by the index its step names."""
        return self.prompts[index]

    def job(self, sample: int) -> Job:
        """The job an arrival with this sample index runs."""
        return self.jobs[sample % len(self.jobs)]

    def describe(self) -> dict[str, Any]:
        """Plain values for the plan's record."""
        return {"kind": "jobs", "path": self.path, "jobs": len(self.jobs),
                "requests": len(self.prompts), "tokenizer": self.tokenizer,
                "steps": sum(len(j.steps) for j in self.jobs),
                "mean_input_tokens": sum(p.input_tokens for p in self.prompts) / len(self.prompts),
                "mean_output_tokens": sum(p.max_tokens for p in self.prompts) / len(self.prompts)}


class _Reader:
    """Builds the book, naming the place of any bad entry."""

    def __init__(self, path: str, tokenizer: str, seed: int, fixed_output: bool) -> None:
        self.path, self.tokenizer, self.seed = path, tokenizer, seed
        self.fixed_output = fixed_output
        self.prompts: list[Prompt] = []

    def error(self, line: int, where: str, message: str) -> SettingsError:
        return SESSION_FILE.bad_row(self.path, line, where, message)

    def job(self, value: Any, line: int, number: int) -> Job:
        where = f"job {number}"
        name = f"job-{number}"
        steps = value
        if isinstance(value, dict):
            unknown = set(value) - {"name", "steps"}
            if unknown:
                raise self.error(line, f"{where}: {sorted(unknown)[0]}",
                                 "unknown field (a job has name and steps)")
            name = value.get("name", name)
            if not isinstance(name, str):
                raise self.error(line, f"{where}: name", "must be a string")
            steps = value.get("steps")
        if not isinstance(steps, list) or not steps:
            raise self.error(line, f"{where}: steps", "expected a non-empty list of steps")
        return Job(name, tuple(self.step(s, line, f"{where}, step {i}")
                               for i, s in enumerate(steps, 1)))

    def step(self, value: Any, line: int, where: str) -> Step:
        think: Any = 0
        requests = value
        if isinstance(value, dict) and "requests" in value:
            unknown = set(value) - _STEP_KEYS
            if unknown:
                raise self.error(line, f"{where}: {sorted(unknown)[0]}",
                                 "unknown field (a step has think_ms and requests)")
            think, requests = value.get("think_ms", 0), value["requests"]
        elif isinstance(value, dict):
            think, requests = value.get("think_ms", 0), [value]
        if not isinstance(requests, list) or not requests:
            raise self.error(line, f"{where}: requests", "expected a request or a non-empty "
                                                         "list of requests")
        if isinstance(think, bool) or not isinstance(think, int | float) \
                or not math.isfinite(think) or think < 0:
            raise self.error(line, f"{where}: think_ms", f"must be ms, not negative, "
                                                         f"got {think!r}")
        several = len(requests) > 1
        bare = isinstance(value, dict) and "requests" not in value  # its think_ms is the step's
        indices = tuple(self.request(r, line, f"{where}, request {i}" if several else where,
                                     bare) for i, r in enumerate(requests, 1))
        return Step(round(think * 1_000_000), indices)

    def request(self, value: Any, line: int, where: str, bare: bool) -> int:
        if not isinstance(value, dict):
            raise self.error(line, where, "a request is an object with prompt or "
                                          "input_tokens, and output_tokens")
        unknown = set(value) - _REQUEST_KEYS
        if unknown:
            raise self.error(line, f"{where}: {sorted(unknown)[0]}", "unknown field (a request "
                             "has prompt or input_tokens, output_tokens, think_ms)")
        if "think_ms" in value and not bare:
            raise self.error(line, f"{where}: think_ms", "a gap belongs to a step: write "
                                                         '{"think_ms": ..., "requests": [...]}')
        output = self.count(value, "output_tokens", line, where)
        index = len(self.prompts)
        if ("prompt" in value) == ("input_tokens" in value):
            raise self.error(line, f"{where}: prompt", "give one of prompt and input_tokens")
        if "prompt" in value:
            text = value["prompt"]
            if not isinstance(text, str) or not text:
                raise self.error(line, f"{where}: prompt", "must be non-empty text")
            tokens = count_tokens(text, self.tokenizer)
        else:
            tokens = self.count(value, "input_tokens", line, where)
            text = synthetic_text(np.random.default_rng((self.seed, 11, index)), tokens,
                                  self.tokenizer)
        self.prompts.append(Prompt(text, tokens, output, self.fixed_output))
        return index

    def count(self, value: dict[str, Any], key: str, line: int, where: str) -> int:
        n = value.get(key)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise self.error(line, f"{where}: {key}", f"must be a whole number >= 1, got {n!r}")
        return n


def _entries(text: str, path: str) -> list[tuple[int, Any]]:
    """(line, job) of JSON lines (a `.jsonl` file, or text not opening with `[`), or of a
    JSON list's elements."""
    start = len(text) - len(text.lstrip())
    if path.endswith(".jsonl") or text[start:start + 1] != "[":
        return SESSION_FILE.json_lines(text, path, "job")
    try:
        jobs = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SESSION_FILE.bad_row(path, exc.lineno, "file", f"not JSON: {exc.msg}") from None
    decoder, pos, out = json.JSONDecoder(), start + 1, []
    for job in jobs:  # each job's line: where its text starts
        while text[pos] in " \t\r\n,":
            pos += 1
        out.append((text.count("\n", 0, pos) + 1, job))
        pos = decoder.raw_decode(text, pos)[1]
    return out


def read_jobs(path: str, tokenizer: str, seed: int, fixed_output: bool = False) -> JobBook:
    """The session file's jobs and prompts (a SettingsError names any bad entry's place)."""
    text = SESSION_FILE.read_text(path)
    reader = _Reader(path, tokenizer, seed, fixed_output)
    jobs = tuple(reader.job(value, line, number)
                 for number, (line, value) in enumerate(_entries(text, path), 1))
    if not jobs:
        raise SettingsError([f"{SESSION_FILE.setting}: {path}: holds no job"])
    return JobBook(path, jobs, tuple(reader.prompts), tokenizer)


def check_jobs(s: Any, open_loop: bool, problems: list[str]) -> None:
    """`session_file` needs an open-loop run of single-sample queries and brings its own
    prompts; `job_deadline_ms` judges its jobs."""
    if s.job_deadline_ms < 0 or not math.isfinite(s.job_deadline_ms):
        problems.append(f"job_deadline_ms: must be ms, not negative, got {s.job_deadline_ms!r}")
    if not s.session_file:
        if s.job_deadline_ms:
            problems.append("job_deadline_ms: a deadline judges the jobs of a session_file; "
                            "set one")
        return
    if not Path(s.session_file).is_file():
        problems.append(f"session_file: no such file {s.session_file!r}")
    if not open_loop:
        problems.append("session_file: jobs start open loop at the plan's arrivals (Server "
                        "with an open-loop arrival, such as poisson), not in this scenario")
    if s.samples_per_query != 1:
        problems.append("session_file: jobs need samples_per_query = 1")
    for key, given in (("input_tokens", s.input_tokens is not None), ("dataset", s.dataset),
                       ("turns", s.turns is not None),
                       ("trace_format", s.trace_format != "auto")):
        if given:
            problems.append(f"{key}: a session_file brings its own requests; set one or the "
                            "other")
