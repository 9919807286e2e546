"""The session file of agentic jobs: its forms, its prompts, and bad entries refused with
the file, line, job, step, request and field named; the settings that go with it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.errors import SettingsError
from loadgen.plan.jobs import read_jobs
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import settings_from_mapping
from loadgen.plan.words import count_tokens

ROOT = Path(__file__).resolve().parents[3]


def write(tmp_path: Path, text: str, name: str = "jobs.json") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_three_step_forms_and_the_prompts_they_name(tmp_path: Path) -> None:
    path = write(tmp_path, json.dumps([
        {"name": "a", "steps": [
            {"input_tokens": 12, "output_tokens": 3},
            {"think_ms": 2.5, "requests": [{"input_tokens": 5, "output_tokens": 1},
                                           {"prompt": "two words", "output_tokens": 2}]},
            [{"input_tokens": 7, "output_tokens": 4}, {"input_tokens": 8, "output_tokens": 4}],
            {"think_ms": 4, "prompt": "last one", "output_tokens": 9}]},
        [{"input_tokens": 3, "output_tokens": 1}]], indent=1))
    book = read_jobs(path, "approx", 5)
    first, second = book.jobs
    assert first.name == "a" and second.name == "job-2"
    assert [s.prompts for s in first.steps] == [(0,), (1, 2), (3, 4), (5,)]
    assert [s.think_ns for s in first.steps] == [0, 2_500_000, 0, 4_000_000]
    assert second.steps[0].prompts == (6,)
    lengths = [(p.input_tokens, p.max_tokens) for p in book.prompts]
    assert lengths == [(12, 3), (5, 1), (2, 2), (7, 4), (8, 4), (2, 9), (3, 1)]
    for p in book.prompts:  # synthetic text is exact under the tokenizer
        assert count_tokens(p.text, "approx") == p.input_tokens
    assert book.prompt(2).text == "two words"
    assert book.job(3) is second and book.in_order
    again = read_jobs(path, "approx", 5)
    assert again.prompts == book.prompts  # seeded


def test_json_lines_one_job_a_line(tmp_path: Path) -> None:
    path = write(tmp_path, '[{"input_tokens": 4, "output_tokens": 2}]\n\n'
                           '{"steps": [{"prompt": "hi", "output_tokens": 1}]}\n', "jobs.jsonl")
    book = read_jobs(path, "bytes", 1)
    assert len(book.jobs) == 2 and book.prompt(1).input_tokens == 2  # "hi": two bytes


@pytest.mark.parametrize(("text", "where"), [
    ('[\n[{"input_tokens": 4, "output_tokens": 2}],\n'
     '[{"input_tokens": 4}]\n]', r":3: job 2, step 1: output_tokens: must be a whole number"),
    ('[\n{"steps": [{"input_tokens": 4, "output_tokens": 1},\n'
     '  {"requests": [{"input_tokens": 1, "output_tokens": 1}, {"prompt": 5, '
     '"output_tokens": 1}]}]}\n]', r":2: job 1, step 2, request 2: prompt: must be non-empty"),
    ('[[{"input_tokens": 4, "output_tokens": 2, "think_ms": -1}]]',
     r":1: job 1, step 1: think_ms: must be ms"),
    ('[[[{"input_tokens": 4, "output_tokens": 2, "think_ms": 3}]]]',
     r":1: job 1, step 1: think_ms: a gap belongs to a step"),
    ('[[{"input_tokens": 4, "prompt": "x", "output_tokens": 2}]]',
     r":1: job 1, step 1: prompt: give one of prompt and input_tokens"),
    ('[{"steps": []}]', r":1: job 1: steps: expected a non-empty list"),
    ('[{"stepz": []}]', r":1: job 1: stepz: unknown field"),
    ('[[{"input_tokens": 4, "output_tokens": 2, "temperature": 1}]]',
     r":1: job 1, step 1: temperature: unknown field"),
    ('[[{"input_tokens": 4, "output_tokens": 2}]]\n[[{"output_tokens": 2}]',
     r":2: file: not JSON: Extra data"),
    ('[[{"input_tokens": 4, "output_tokens": 2}],\n oops]', r":2: file: not JSON"),
    ('{"steps": [{"input_tokens": 4, "output_tokens": 2}]}\n\n{"steps": [\n',
     r":3: job: not JSON: Expecting value"),
])
def test_a_bad_entry_is_refused_naming_its_place(tmp_path: Path, text: str, where: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SettingsError, match=r"session_file: .*jobs\.json" + where):
        read_jobs(path, "approx", 1)


def test_an_empty_file_holds_no_job(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="holds no job"):
        read_jobs(write(tmp_path, "[]"), "approx", 1)


BASE = {"target_latency_ms": 100, "session_file": str(ROOT / "scenarios/sessions/agent_jobs.json")}


def test_settings_refuse_what_makes_no_sense_with_jobs() -> None:
    s = settings_from_mapping(BASE | {"job_deadline_ms": 500})
    assert RunPlan.of(s).job_deadline_ns == 500_000_000
    for more, message in (
            ({"scenario": "SingleStream"}, "session_file: jobs start open loop"),
            ({"arrival": "closed"}, "session_file: jobs start open loop"),
            ({"input_tokens": 8}, "input_tokens: a session_file brings its own requests"),
            ({"turns": 2}, "turns: a session_file brings its own requests"),
            ({"job_deadline_ms": -1}, "job_deadline_ms: must be ms"),
            ({"session_file": "/nonexistent/jobs.json"}, "session_file: no such file")):
        with pytest.raises(SettingsError, match=message):
            settings_from_mapping(BASE | more)
    with pytest.raises(SettingsError, match="job_deadline_ms: a deadline judges the jobs"):
        settings_from_mapping({"target_latency_ms": 100, "input_tokens": 8,
                               "job_deadline_ms": 10})


def test_a_bad_file_is_refused_when_the_run_is_planned(tmp_path: Path) -> None:
    s = settings_from_mapping(BASE | {"session_file": write(tmp_path, '[[{"prompt": "x"}]]')})
    with pytest.raises(SettingsError, match=r"jobs\.json:1: job 1, step 1: output_tokens"):
        RunPlan.of(s)
