"""The summary's SUT line: where an in-process run's samples started, beside its executor."""

from __future__ import annotations

from loadgen.api import run_test
from loadgen.plan.settings import load_settings
from loadgen.report.summary import render_summary


def test_the_sut_line_says_where_samples_start_beside_the_executor() -> None:
    settings = load_settings(None, ["scenario='Offline'", "preset='dev'", "target_qps=2000",
                                    "min_duration_s=0.2", "warmup_s=0", "energy='off'"])
    result = run_test(settings, "builtin:mlp,device=cpu,max_batch_size=32,warmup=0")
    assert result.sut["samples"] == "host"
    assert result.sut["samples_note"] == "on the CPU samples start on the host"
    line = next(x for x in render_summary(result).splitlines() if x.startswith("SUT "))
    assert "executor=serial, eager" in line
    assert line.index("executor=") < line.index("samples=host") < line.index("samples_note=")
