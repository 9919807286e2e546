"""benchmarks/llm_serving.py's peak search: capped, bounded in time, honest about its ends."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def _bench() -> ModuleType:
    path = Path(__file__).resolve().parents[3] / "benchmarks" / "llm_serving.py"
    spec = importlib.util.spec_from_file_location("llm_serving_bench", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


bench = _bench()


def _search(start: float = 10.0, cap: float = 80.0, bisections: int = 3,
            budget_s: float = 60.0) -> object:
    return bench.Search(start, cap, bisections, budget_s, 0.9)


def _trial(rate: float, attainment: float) -> object:
    return bench.Trial(rate, attainment, attainment, 1.0, 1.0, 1.0)


def _threshold(limit: float):  # type: ignore[no-untyped-def]
    return lambda rate: _trial(rate, 1.0 if rate <= limit else 0.5)


def test_a_peak_inside_the_range_is_bracketed_then_bisected() -> None:
    peak = bench.peak_rate(_threshold(27.0), lambda rate: 0.0, _search())
    assert peak.outcome == "found"
    assert 20.0 <= peak.rate <= 27.0 < peak.failed_at <= 40.0
    assert [t.rate for t in peak.trials][:3] == [10.0, 20.0, 40.0]
    assert len(peak.trials) == 3 + 3  # bracket, then three bisections


def test_an_engine_that_never_saturates_stops_at_the_cap_and_says_so() -> None:
    peak = bench.peak_rate(lambda rate: _trial(rate, 1.0), lambda rate: 0.0, _search(cap=1e3))
    assert peak.outcome == "never saturated" and peak.rate == 1e3 and peak.failed_at is None
    assert max(t.rate for t in peak.trials) == 1e3 and len(peak.trials) <= 8


def test_a_rate_failing_down_to_the_floor_is_never_met() -> None:
    peak = bench.peak_rate(lambda rate: _trial(rate, 0.0), lambda rate: 0.0, _search())
    assert peak.outcome == "never met" and peak.rate is None
    assert peak.failed_at == pytest.approx(10.0 / 64)


def test_a_trial_that_would_overrun_the_budget_is_not_started() -> None:
    peak = bench.peak_rate(_threshold(1.0), lambda rate: 100.0 / rate, _search(budget_s=15.0))
    assert peak.outcome == "out of time"
    assert [t.rate for t in peak.trials] == [10.0]  # the next, 5 req/s, would take 20 s
    assert peak.rate is None and peak.failed_at == 10.0


def test_the_ratio_claims_only_what_the_trials_show() -> None:
    found = bench.Peak(40.0, 45.0, "found", [])
    static = bench.Peak(8.0, 10.0, "found", [])
    ratio = bench._ratio(found, static)
    assert ratio["value"] == pytest.approx(5.0) and ratio["at_least"] == pytest.approx(4.0)
    assert ratio["met"]
    never = bench.Peak(None, 2.0, "never met", [])
    assert bench._ratio(found, never)["at_least"] == pytest.approx(20.0)
    assert not bench._ratio(bench.Peak(None, 1.0, "never met", []), static)["met"]
    unbounded = bench._ratio(bench.Peak(80.0, None, "never saturated", []), static)
    assert "lower bound" in unbounded["text"] and unbounded["at_least"] == pytest.approx(8.0)
