"""find-peak on goodput: the attainment criterion with confidence, and on llmsim the peak lands
within 5% of the analytic capacity (constant arrivals: below capacity no queue builds, above it
TTFT grows without bound, so the knee is the capacity)."""

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from loadgen.adapters.llmsim import CostModel, capacity_qps
from loadgen.campaigns.search import SearchConfig, find_peak, goodput_probe_passes
from loadgen.errors import SettingsError
from loadgen.judge.tokenstats import Goodput
from loadgen.plan.settings import load_settings

MS, US = 1_000_000, 1_000
# iterations of several ms, so the harness's own issue lag (ms on a loaded machine) stays small
MODEL = CostModel(step_base_ns=5 * MS, step_per_seq_ns=250 * US, prefill_per_token_ns=25 * US,
                  max_seqs=8)
SPEC = "llmsim:step_base=5ms,step_per_seq=250us,prefill_per_token=25us,max_seqs=8"


def _result(good: int, attempted: int) -> SimpleNamespace:
    """The parts of a RunResult that goodput_probe_passes reads."""
    goodput = Goodput({}, good, attempted, good / attempted, 0.0, 0.0)
    return SimpleNamespace(stats=SimpleNamespace(
        token_stats=SimpleNamespace(goodput=goodput), interrupted=False))


@pytest.mark.parametrize(("good", "attempted", "passes"), [
    (459, 459, True),  # p99: 459 with no miss pass
    (458, 458, False),
    (9_923, 10_000, True),  # 77 misses allowed at 10,000
    (9_922, 10_000, False),
])
def test_attainment_passes_with_confidence(good: int, attempted: int, passes: bool) -> None:
    assert goodput_probe_passes(_result(good, attempted), 0.99) is passes  # type: ignore[arg-type]


def test_a_bad_goal_is_refused(tmp_path: Path) -> None:
    settings = load_settings(None, ["target_latency_ms=10"])
    with pytest.raises(SettingsError, match="goal"):
        find_peak(settings, SPEC, tmp_path, SearchConfig(start_qps=10, goal="fast"))
    with pytest.raises(SettingsError, match="min_attainment"):
        find_peak(settings, SPEC, tmp_path, SearchConfig(start_qps=10, goal="attainment",
                                                         min_attainment=1.0))


@pytest.mark.serial  # the peak found is the harness's on a loaded host (skips then)
def test_find_peak_on_llmsim_lands_on_the_capacity(tmp_path: Path) -> None:
    capacity = capacity_qps(MODEL, 100, 16)  # 60.6 requests/s
    # 4 s probes (not the dev preset's 459 queries, 8 s at these rates): at a fraction e over
    # the capacity the queue's wait grows by e x t, so a probe of T s fails once e x T passes
    # the TTFT goal's slack (~50 ms here) for more than the ~5% of requests the attainment
    # test allows: from e ~ 1.3% at T = 4 (2.5% at 2 s; found 61.9 QPS, 2% high, there),
    # well inside the 5% asserted
    settings = load_settings(None, [
        "preset='dev'", "arrival='constant'", "min_duration_s=4", "min_query_count=50",
        "warmup_s=0.2", "target_latency_ms=1000", "goodput_ttft_ms=60", "input_tokens=100",
        "output_tokens=16", "fixed_output=true", "max_issue_lag_ms=20"])
    # bracketing from 0.9 x capacity by 1.2x steps takes 2 probes to straddle it and 3
    # bisections to 3% (from 0.6 x by 2x: 2 and 5); a knee off the capacity, either way, is
    # still found where it is and fails the assertion
    cfg = SearchConfig(start_qps=round(0.9 * capacity), growth=1.2, tolerance=0.03, repeats=1,
                       min_queries=50, goal="attainment", min_attainment=0.9)
    doc = find_peak(settings, SPEC, tmp_path, cfg, budget_s=120).as_dict()
    assert doc["goal"] == {"goal": "attainment", "min_attainment": 0.9}
    on_capacity = doc["peak_qps"] == pytest.approx(capacity, rel=0.05)
    if not on_capacity and (doc["harness_high"] or doc["status"] == "harness_limited"):
        pytest.skip(f"the machine is too busy for the harness to keep its schedule: "
                    f"{doc['headline']}")
    assert doc["status"] == "converged", doc["headline"]
    assert on_capacity, (doc["bracket"], capacity)
    again = find_peak(settings, SPEC, tmp_path, cfg, budget_s=120)  # replays its journal
    assert list(again.bracket) == doc["bracket"]
    with pytest.raises(Exception, match="other settings"):
        find_peak(settings, SPEC, tmp_path, dataclasses.replace(cfg, min_attainment=0.8))
