"""loadgen: an MLPerf-style load generator for inference serving.

    import loadgen

    settings = loadgen.load_settings("scenarios/server.toml", ["preset='dev'"])
    result = loadgen.run_test(settings, "sim:service=exp:2ms,servers=2", out_dir=Path("runs/x"))
    print(result.valid, result.verdict.codes, result.stats.query_latency_ns.p99)

The stages, in the order data flows through them: `plan` (settings -> RunPlan,
the schedule), `adapters` (the SUT seam), `record` (stamps into histograms),
`engine` (the run session), `judge` (statistics and verdict), `report`
(result.json, summary, HTML), `live` (Prometheus, progress), `campaigns`
(sweep, find-peak, compare, calibrate), `cli`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadgen.adapters.base import CompletionSink, SystemUnderTest, Timers
    from loadgen.adapters.registry import make_sut
    from loadgen.api import Monitor, run_async, run_test
    from loadgen.errors import LoadgenError, ResultError, SettingsError, SutError, SutSpecError
    from loadgen.judge.stats import RunStats
    from loadgen.judge.verdict import Reason, ReasonCode, Verdict
    from loadgen.plan.plan import RunPlan
    from loadgen.plan.settings import (
        IssueMode,
        Scenario,
        TestSettings,
        load_settings,
        settings_from_mapping,
    )
    from loadgen.report.result import RunResult, read_result

_HOMES = {  # public name -> the module that defines it; imported on first use
    "CompletionSink": "loadgen.adapters.base",
    "SystemUnderTest": "loadgen.adapters.base",
    "Timers": "loadgen.adapters.base",
    "make_sut": "loadgen.adapters.registry",
    "Monitor": "loadgen.api",
    "run_async": "loadgen.api",
    "run_test": "loadgen.api",
    "LoadgenError": "loadgen.errors",
    "ResultError": "loadgen.errors",
    "SettingsError": "loadgen.errors",
    "SutError": "loadgen.errors",
    "SutSpecError": "loadgen.errors",
    "RunStats": "loadgen.judge.stats",
    "Reason": "loadgen.judge.verdict",
    "ReasonCode": "loadgen.judge.verdict",
    "Verdict": "loadgen.judge.verdict",
    "RunPlan": "loadgen.plan.plan",
    "IssueMode": "loadgen.plan.settings",
    "Scenario": "loadgen.plan.settings",
    "TestSettings": "loadgen.plan.settings",
    "load_settings": "loadgen.plan.settings",
    "settings_from_mapping": "loadgen.plan.settings",
    "RunResult": "loadgen.report.result",
    "read_result": "loadgen.report.result",
}


def __getattr__(name: str) -> Any:
    """The public names, imported on first use (so `loadgen serve` starts light)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'loadgen' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "CompletionSink",
    "IssueMode",
    "LoadgenError",
    "Monitor",
    "Reason",
    "ReasonCode",
    "ResultError",
    "RunPlan",
    "RunResult",
    "RunStats",
    "Scenario",
    "SettingsError",
    "SutError",
    "SutSpecError",
    "SystemUnderTest",
    "TestSettings",
    "Timers",
    "Verdict",
    "load_settings",
    "make_sut",
    "read_result",
    "run_async",
    "run_test",
    "settings_from_mapping",
]
