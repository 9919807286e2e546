"""Agentic jobs (`session_file`): a step's requests go out together (fan-out), the next
step waits for every one of them (fan-in) and its think gap; the job's time runs from its
arrival; `job_deadline_ms` is judged with early stopping (INVALID `job_deadline`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.adapters.tokens import TokenStream
from loadgen.api import run_test
from loadgen.engine.jobs import JobFlow
from loadgen.judge.stats import RunStats
from loadgen.plan.jobs import JobBook, read_jobs
from loadgen.plan.settings import settings_from_mapping
from loadgen.record.histograms import summary_ns
from loadgen.record.jobs import JobRecorder
from loadgen.report.html import build_report
from loadgen.report.summary import render_summary
from tests.loadgen.llm.virtual import VirtualTime

MS = 1_000_000
ROOT = Path(__file__).resolve().parents[3]
FAN_OUT = [[{"input_tokens": 6, "output_tokens": 2}],
           {"think_ms": 20, "requests": [{"input_tokens": 4, "output_tokens": 1}] * 3},
           {"think_ms": 5, "input_tokens": 9, "output_tokens": 3}]


def book_of(tmp_path: Path, jobs: list[Any]) -> JobBook:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(jobs))
    return read_jobs(str(path), "approx", 1)


class Flow:
    """A JobFlow in virtual time whose sends are kept: (query id, scheduled, prompt)."""

    def __init__(self, book: JobBook) -> None:
        self.vt = VirtualTime()
        self.sent: list[tuple[int, int, int]] = []
        self.recorder = JobRecorder(deadline_ns=60 * MS)
        ids = iter(range(100, 200))
        self.flow = JobFlow(book, self.vt.call_at_ns,
                            lambda q, at, prompt, measured: self.sent.append((q, at, prompt)),
                            lambda: next(ids), lambda: False, self.recorder)


def test_fan_out_goes_together_and_fan_in_waits_for_the_last(tmp_path: Path) -> None:
    f = Flow(book_of(tmp_path, [FAN_OUT]))
    f.flow.begin(7, 0, 0, True)
    assert f.sent == [(7, 0, 0)]  # the arrival's id, at the arrival
    f.flow.ended(7, 10 * MS, True)
    assert f.flow.pending == 1 and len(f.sent) == 1  # the gap first
    f.vt.run_until()
    fan = f.sent[1:]
    assert [(at, prompt) for _, at, prompt in fan] == [(30 * MS, 1), (30 * MS, 2), (30 * MS, 3)]
    ids = [q for q, _, _ in fan]
    f.flow.ended(ids[0], 40 * MS, True)
    f.flow.ended(ids[2], 50 * MS, True)  # the slowest ends second
    assert len(f.sent) == 4 and f.flow.pending == 0  # one still in flight: no next step
    f.flow.ended(ids[1], 45 * MS, True)
    f.vt.run_until()
    assert f.sent[-1][1:] == (55 * MS, 4)  # the latest end (50) plus the gap (5)
    f.flow.ended(f.sent[-1][0], 70 * MS, True)
    tally = f.recorder.tally()
    assert tally.counters == {"started": 1, "finished": 1, "failed": 0, "over_deadline": 1}
    # from the arrival to the last end (HDR keeps 3 significant digits)
    assert summary_ns(tally.time_ns)["max"] == pytest.approx(70 * MS, rel=1e-3)


def test_a_failed_request_fails_its_job_and_sends_no_more(tmp_path: Path) -> None:
    f = Flow(book_of(tmp_path, [FAN_OUT]))
    f.flow.begin(1, 0, 0, True)
    f.flow.ended(1, MS, True)
    f.vt.run_until()
    ids = [q for q, _, _ in f.sent[1:]]
    f.flow.ended(ids[0], 30 * MS, False)
    f.flow.ended(ids[1], 31 * MS, True)
    f.flow.ended(ids[2], 32 * MS, True)
    f.vt.run_until()
    assert len(f.sent) == 4
    assert f.recorder.tally().counters == {"started": 1, "finished": 0, "failed": 1,
                                           "over_deadline": 0}


def test_an_unmeasured_job_runs_and_is_not_filed(tmp_path: Path) -> None:
    f = Flow(book_of(tmp_path, [[{"prompt": "a b", "output_tokens": 1}]]))
    f.flow.begin(1, 0, 0, False)
    f.flow.ended(1, MS, True)
    assert f.recorder.tally().counters["started"] == 0 and len(f.sent) == 1


class HoldingSut:
    """Answers a fan-out step only once all its requests are in flight together, 1 ms
    later (so requests sent one by one would wait for ever, bounded by query_timeout_ms);
    any other request 1 ms after it came. Keeps (prompt, sent, answered) per request."""

    name = "holding"

    def __init__(self, fan_out: set[int]) -> None:
        self.fan_out = fan_out
        self.held: list[tuple[int, int]] = []
        self.log: dict[int, tuple[int, int, int]] = {}

    async def start(self, sink: Any, timers: Any) -> None:
        self.sink, self.timers = sink, timers

    def use_prompts(self, prompts: Any) -> None:
        self.prompts = prompts

    def issue(self, query_id: int, samples: np.ndarray) -> None:
        now, prompt = time.perf_counter_ns(), int(samples[0])
        self.log[query_id] = (prompt, now, 0)
        if prompt not in self.fan_out:
            self._answer([query_id], now + MS)
            return
        self.held.append((query_id, prompt))
        if {p for _, p in self.held} == self.fan_out:
            self._answer([q for q, _ in self.held], now + MS)
            self.held.clear()

    def _answer(self, ids: list[int], at: int) -> None:
        def answer() -> None:
            for q in ids:
                prompt, sent, _ = self.log[q]
                self.log[q] = (prompt, sent, at)
                stream = TokenStream()
                stream.add(at, self.prompts.prompt(prompt).max_tokens)
                self.sink.streamed(q, at, stream)
        self.timers.call_at_ns(at, answer)

    async def stop(self) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"sut": "holding"}


def settings(session_file: Path | str, **more: object) -> Any:
    return settings_from_mapping({
        "scenario": "Server", "arrival": "constant", "target_qps": 25.0, "preset": "dev",
        "min_duration_s": 0.3, "min_query_count": 8, "target_latency_ms": 2000.0,
        "target_latency_percentile": 50.0, "max_issue_lag_ms": 1000.0,
        "query_timeout_ms": 2000.0, "drain_timeout_s": 5.0,
        "session_file": str(session_file), **more})


def test_a_run_sends_each_fan_out_together_after_its_gap(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([FAN_OUT]))
    sut = HoldingSut(fan_out={1, 2, 3})
    result = run_test(settings(path), sut, out_dir=tmp_path / "run")
    jobs = result.stats.job_stats
    assert jobs is not None and result.stats.errors == 0
    assert jobs.count >= 8 and jobs.finished == jobs.count  # every fan-out was answered
    steps = sorted(sut.log.values(), key=lambda e: e[1])
    first_ends = [answered for prompt, _, answered in steps if prompt == 0]
    fans = [sent for prompt, sent, _ in steps if prompt == 1]
    lasts = [sent for prompt, sent, _ in steps if prompt == 4]
    assert len(fans) == len(first_ends) == jobs.count
    for end, fan_sent in zip(sorted(first_ends), sorted(fans), strict=True):
        assert fan_sent >= end + 20 * MS  # the think gap after the step before
    fan_ends = sorted(answered for prompt, _, answered in steps if prompt == 3)
    for end, last_sent in zip(fan_ends, sorted(lasts), strict=True):
        assert last_sent >= end + 5 * MS
    assert "Jobs      :" in render_summary(result)
    page = build_report(tmp_path / "run").read_text()
    assert "<h2>Jobs</h2>" in page and "job time p99 (ms)" in page


LLMSIM = "llmsim:step_base=1ms,step_per_seq=100us,prefill_per_token=10us"


def test_the_job_deadline_met_is_valid_and_missed_is_invalid(tmp_path: Path) -> None:
    sample = ROOT / "scenarios/sessions/agent_jobs.json"
    met = run_test(settings(sample, job_deadline_ms=5000), LLMSIM, out_dir=tmp_path / "met")
    doc = json.loads((tmp_path / "met/result.json").read_text())
    jobs = doc["jobs"]
    assert met.verdict.valid, met.verdict.reasons
    assert jobs["attained"] == jobs["count"] == jobs["finished"] >= 8
    assert jobs["early_stopping"]["passes"] and jobs["deadline_ms"] == 5000
    assert 0 < jobs["time_ns"]["p50"] <= jobs["time_ns"]["p99"]
    missed = run_test(settings(sample, job_deadline_ms=1), LLMSIM, out_dir=tmp_path / "missed")
    assert "job_deadline" in missed.verdict.codes and not missed.verdict.valid
    figures = missed.stats.job_stats
    assert figures is not None and figures.attained == 0
    assert figures.early_stopping is not None and not figures.early_stopping["passes"]
    assert "deadline 1 ms: 0 of" in render_summary(missed)


def test_the_job_tally_survives_encode_and_merges_exactly() -> None:
    r = JobRecorder(deadline_ns=10 * MS)
    r.started(), r.started(), r.failed()
    r.finished(12 * MS)
    t = r.tally()
    again = type(t).decode(json.loads(json.dumps(t.encode())))
    merged = type(t).merge([t, again])
    assert merged.counters == {"started": 4, "finished": 2, "failed": 2, "over_deadline": 2}
    assert merged.time_ns.total_count == 2 and merged.deadline_ns == 10 * MS


def test_load_processes_merge_their_jobs(tmp_path: Path) -> None:
    sample = ROOT / "scenarios/sessions/agent_jobs.json"
    result = run_test(settings(sample, job_deadline_ms=5000, workers=2), LLMSIM,
                      out_dir=tmp_path / "two")
    jobs = result.stats.job_stats
    assert jobs is not None and jobs.count >= 8 and jobs.finished == jobs.count
    assert jobs.time_ns["count"] == jobs.count and jobs.early_stopping is not None
    per_job = {0: 5, 1: 2, 2: 3}  # requests of the sample's jobs
    assert result.stats.queries == sum(per_job[i % 3] for i in range(jobs.count))


def test_the_jobs_block_reads_back_from_result_json(tmp_path: Path) -> None:
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps([FAN_OUT]))
    result = run_test(settings(path, job_deadline_ms=5000), LLMSIM, out_dir=tmp_path / "run")
    doc = json.loads((tmp_path / "run/result.json").read_text())
    assert RunStats.from_dict(doc).job_stats == result.stats.job_stats
