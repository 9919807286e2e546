"""The README's workload examples as a user runs them: `loadgen serve --model tiny-llm` in a
subprocess, then (through the CLI's entry point, in this process) `loadgen run
scenarios/mooncake.toml` (the Mooncake-format sample), `loadgen run scenarios/prefix_cache.toml`
(a prefix-cache experiment with its verdict), `loadgen run scenarios/sharegpt.toml` (the
ShareGPT-format sample) and `loadgen run scenarios/agent_jobs.toml` (agentic jobs with fan-out,
fan-in and a deadline)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.cli.main import main as cli_main
from loadgen.plan.traces.blocks import ideal_cached_tokens
from loadgen.plan.traces.mooncake import read_mooncake
from tests.served import ROOT, serve_tiny_llm

pytestmark = pytest.mark.functional


def _run(scenario: str, sut: str, out: Path) -> dict[str, object]:
    """`loadgen run SCENARIO --sut SUT --out OUT` through the CLI's entry point, in this
    process (the server is the subprocess; an interpreter start per run adds nothing)."""
    assert cli_main(["run", scenario, "--sut", sut, "--out", str(out), "--quiet"]) in (0, 1)
    doc: dict[str, object] = json.loads((out / "result.json").read_text())
    return doc


def test_the_readme_workload_examples(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # the README's commands run from the repository's root
    with serve_tiny_llm("--max-num-seqs", "8") as (_, address):
        # no preflight: its request (the first prompt) would prime the cache
        sut = f"openai://{address}/tiny-llm?endpoint=completions&preflight=0"
        trace = _run("scenarios/mooncake.toml", sut, tmp_path / "mooncake")
        experiment = _run("scenarios/prefix_cache.toml", sut, tmp_path / "prefix")
        sharegpt = _run("scenarios/sharegpt.toml", sut.replace("completions", "chat"),
                        tmp_path / "sharegpt")
        jobs = _run("scenarios/agent_jobs.toml", sut, tmp_path / "jobs")
    rows = read_mooncake(ROOT / "scenarios/traces/mooncake_sample.jsonl", 32)
    ideal, prompt = ideal_cached_tokens(rows, 32)
    cache = trace["tokens"]["cache"]  # type: ignore[index]
    assert trace["errors"] == 0 and cache["requests_reporting"] == rows.seconds.size
    assert cache["hit_rate"]["requested"] == pytest.approx(ideal / prompt)
    # a request arriving while an earlier one with its prefix is still in prefill may miss
    assert 0.9 * ideal <= cache["cached_tokens_total"] <= ideal
    rate = experiment["tokens"]["cache"]["hit_rate"]  # type: ignore[index]
    assert rate["requested"] == 0.6 and abs(rate["achieved"] - 0.6) <= 0.05
    assert "cache_hit_rate" not in experiment["reason_codes"]  # type: ignore[operator]
    assert sharegpt["errors"] == 0 and sharegpt["tokens"]["requests"] > 0  # type: ignore[index]
    figures = jobs["jobs"]  # type: ignore[index]
    assert jobs["errors"] == 0 and figures["count"] >= 10  # type: ignore[index]
    assert figures["finished"] == figures["count"] == figures["attained"]
    assert figures["early_stopping"]["passes"]
    assert "job_deadline" not in jobs["reason_codes"]  # type: ignore[operator]
    requests = 0  # every request of every job went out and came back: 5, 2 and 3 a job
    for i in range(figures["count"]):
        requests += (5, 2, 3)[i % 3]
    assert jobs["tokens"]["requests"] == requests  # type: ignore[index]
