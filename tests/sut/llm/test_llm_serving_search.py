"""benchmarks/llm_serving.py's peak search: capped, bounded in time and trials, honest about its
ends; static's search starts at continuous's peak / 3, so one failure there shows the 3x target;
the whole benchmark on tiny-llm on the CPU writes both peaks and the ratio's bounds."""

from __future__ import annotations

import importlib.util
import json
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
            budget_s: float = 60.0, max_trials: int = 20) -> object:
    return bench.Search(start, cap, bisections, budget_s, 0.9, max_trials)


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


def test_a_search_stops_at_its_trial_cap_and_says_so() -> None:
    peak = bench.peak_rate(_threshold(27.0), lambda rate: 0.0, _search(max_trials=2))
    assert peak.outcome == "out of trials" and [t.rate for t in peak.trials] == [10.0, 20.0]
    assert peak.rate == 20.0 and peak.failed_at is None and peak.shown == ">= 20.00 req/s"


CONTINUOUS = bench.Peak(132.8, 140.0, "found", [])


def test_static_failing_at_a_third_of_continuous_shows_the_target_in_one_trial() -> None:
    second = bench.static_search(_search(), CONTINUOUS, budget_s=3.0)
    assert second.start == pytest.approx(132.8 / 3) and second.budget_s == 3.0
    # the next trial, at 22.1 req/s, would take 4.5 s: past the 3 s static has left
    static = bench.peak_rate(_threshold(20.0), lambda rate: 100.0 / rate, second)
    assert static.outcome == "out of time" and len(static.trials) == 1
    assert static.rate is None and static.shown == "< 44.27 req/s"
    ratio = bench._ratio(CONTINUOUS, static)
    assert ratio["at_least"] == pytest.approx(3.0) and ratio["met"] and ratio["claim"] == "met"
    assert ratio["value"] is None and ratio["at_most"] is None


def test_static_holding_a_third_of_continuous_refutes_the_target_once_bounded() -> None:
    static = bench.peak_rate(_threshold(60.0), lambda rate: 0.0,
                             bench.static_search(_search(), CONTINUOUS, budget_s=60.0))
    assert static.trials[0].rate == pytest.approx(132.8 / 3) and static.outcome == "found"
    assert 44.2 < static.rate <= 60.0 < static.failed_at
    ratio = bench._ratio(CONTINUOUS, static)
    assert not ratio["met"] and ratio["claim"] == "refuted"
    assert ratio["at_most"] == pytest.approx(140.0 / static.rate) and ratio["at_most"] < 3.0


def test_static_starts_where_continuous_did_when_continuous_passed_no_rate() -> None:
    never = bench.Peak(None, 2.0, "never met", [])
    assert bench.static_search(_search(start=7.0), never, budget_s=1.0).start == 7.0


def test_the_peaks_on_tiny_llm_give_both_peaks_and_the_ratio() -> None:
    args = bench.parse_args(["--max-num-seqs", "4", "--requests", "4", "--search-s", "2",
                             "--bisections", "1", "--max-trials", "2", "--attainment", "0.5",
                             "--ttft-steps", "2000", "--tpot-steps", "50", "--json"])
    lines: list[str] = []
    figures = bench.peak_figures(bench._engine(args, "continuous"), args, lines.append)
    figures = json.loads(json.dumps(figures))  # what --json prints
    continuous, static = figures["continuous"], figures["static"]
    assert 1 <= len(continuous["trials"]) <= 2 and 1 <= len(static["trials"]) <= 2
    if continuous["req_per_s"] is not None:  # static's first trial: continuous's peak / 3
        assert figures["static_start_req_per_s"] == pytest.approx(continuous["req_per_s"] / 3)
    assert static["trials"][0]["rate"] == pytest.approx(figures["static_start_req_per_s"],
                                                        abs=1e-3)
    assert figures["claim"] in ("met", "refuted", "open")
    assert figures["met"] == (figures["claim"] == "met")
    if static["req_per_s"] is None:
        assert static["shown"] == f"< {static['lowest_failing_req_per_s']:.2f} req/s"
    assert any(line.startswith("  static     peak ") for line in lines)
    assert any(line.startswith("  continuous / static: ") for line in lines)
