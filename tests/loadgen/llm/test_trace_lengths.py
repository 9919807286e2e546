"""Trace replay with lengths: query i of the replay is sent at row i's time asking row i's
input and output tokens; a trace naming one length column only, or a bad count, is refused."""

import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.api import run_test
from loadgen.errors import SettingsError
from loadgen.plan.plan import RunPlan
from loadgen.plan.schedule import plan_queries
from loadgen.plan.settings import settings_from_mapping
from loadgen.plan.workload import SyntheticPrompts, count_tokens

ROWS = 60


def _trace(tmp_path: Path, suffix: str = ".csv") -> tuple[Path, list[int], list[int]]:
    inputs = [10 + (7 * i) % 40 for i in range(ROWS)]
    outputs = [2 + (3 * i) % 6 for i in range(ROWS)]
    path = tmp_path / f"trace{suffix}"
    if suffix == ".csv":
        lines = ["timestamp,input_tokens,output_tokens"]
        lines += [f"{100 + 0.02 * i:.3f},{a},{b}" for i, (a, b) in enumerate(zip(inputs, outputs, strict=True))]
        path.write_text("\n".join(lines) + "\n")
    else:
        path.write_text("\n".join(json.dumps({"offset_s": 0.02 * i, "input_tokens": a,
                                              "output_tokens": b})
                                  for i, (a, b) in enumerate(zip(inputs, outputs, strict=True))) + "\n")
    return path, inputs, outputs


def _settings(path: Path, **more: object) -> dict[str, object]:
    return {"scenario": "Server", "arrival": "trace", "trace_file": str(path), "preset": "dev",
            "min_duration_s": 0.0, "min_query_count": 1, "target_latency_ms": 1000.0,
            "max_issue_lag_ms": 50.0, **more}


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_query_i_asks_row_i_lengths(tmp_path: Path, suffix: str) -> None:
    path, inputs, outputs = _trace(tmp_path, suffix)
    plan = RunPlan.of(settings_from_mapping(_settings(path)))
    assert isinstance(plan.prompts, SyntheticPrompts) and plan.prompts.in_order
    _, samples = plan_queries(plan)
    first = next(samples)
    assert np.array_equal(first[:ROWS, 0], np.arange(ROWS))
    for i in (0, 1, 17, ROWS - 1):
        p = plan.prompts.prompt(i)
        assert (p.input_tokens, p.max_tokens) == (inputs[i], outputs[i])
        assert count_tokens(p.text, "approx") == inputs[i]
    assert plan.as_dict()["tokens"]["prompts"]["kind"] == "trace"


def test_a_trace_without_lengths_is_not_a_token_workload(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("offset_s\n0\n0.1\n")
    assert RunPlan.of(settings_from_mapping(_settings(path))).prompts is None


@pytest.mark.parametrize(("text", "needle"), [
    ("offset_s,input_tokens\n0,5\n", "not output_tokens"),
    ("offset_s,input_tokens,output_tokens\n0,5,3\n0.1,x,3\n", "line 3: input_tokens 'x'"),
    ("offset_s,input_tokens,output_tokens\n0,5,0\n", "output_tokens '0'"),
])
def test_bad_trace_lengths_are_named(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(SettingsError, match=needle):
        RunPlan.of(settings_from_mapping(_settings(path)))


def test_a_replay_on_llmsim_asks_every_row_once(tmp_path: Path) -> None:
    path, inputs, outputs = _trace(tmp_path)
    result = run_test(settings_from_mapping(_settings(path)), "llmsim:step_base=1ms")
    ts = result.stats.token_stats
    assert ts is not None and result.stats.queries == ROWS
    assert ts.tokens.input_total == sum(inputs) and ts.tokens.output_total == sum(outputs)
