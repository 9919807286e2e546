"""Each load process's own share of the schedule (`share_queries`): independent Poisson
streams pass the checks seeded thinning passes (rate, exponential gaps, independent
shares), a constant rate splits by position, a trace or gamma schedule is still
partitioned exactly, and one process's schedule is the plan, unchanged."""

import dataclasses
import itertools

import numpy as np
import pytest

from loadgen.plan.arrivals import ConstantShare, Gamma, Poisson, Steps, Trace
from loadgen.plan.plan import RunPlan
from loadgen.plan.schedule import (
    CHUNK,
    open_loop_offsets,
    plan_queries,
    save_schedule,
    schedule_offsets,
    share_process,
    share_queries,
    share_size,
    split_kind,
    thin,
)
from loadgen.plan.settings import load_settings
from loadgen.plan.tracefile import SCHEDULE_FILE

RATE = 20_000.0
POISSON = ["preset='dev'", "target_latency_ms=10", f"target_qps={RATE}", "min_duration_s=6",
           "warmup_s=0", "min_query_count=1"]


def _plan(*extra: str) -> RunPlan:
    return RunPlan.of(load_settings(None, [*POISSON, *extra]))


def _share(plan: RunPlan, index: int, count: int) -> tuple[np.ndarray, list[int]]:
    """A share's offsets and ids, walked as the runner walks them (offsets, then rows)."""
    (offsets, samples), ids = share_queries(plan, index, count)
    assert offsets is not None
    chunks = []
    for chunk in offsets:
        next(samples)
        chunks.append(chunk)
    got = np.concatenate(chunks)
    return got, list(itertools.islice(ids, got.size)) if ids is not None else []


def _thinned(plan: RunPlan, index: int, count: int) -> np.ndarray:
    """Today's walk: the seeded-thinning share of the whole plan."""
    (offsets, _), _ = thin(plan_queries(plan), plan.settings.schedule_rng_seed, index, count)
    assert offsets is not None
    return np.concatenate(list(offsets))


def _exponential_ks(gaps: np.ndarray) -> float:
    """Kolmogorov-Smirnov distance of the gaps from an exponential of their own mean."""
    x = np.sort(gaps) / gaps.mean()
    n = x.size
    cdf = 1.0 - np.exp(-x)
    return float(max((np.arange(1, n + 1) / n - cdf).max(), (cdf - np.arange(n) / n).max()))


def _poisson_checks(union: np.ndarray, shares: list[np.ndarray], rate: float) -> None:
    """What a Poisson schedule at `rate` split into independent Poisson shares must pass."""
    count = len(shares)
    span = float(union[-1] - union[0])
    for offsets, want in [(union, rate), *[(s, rate / count) for s in shares]]:
        gaps = np.diff(offsets).astype(np.float64)
        # n >= 30k gaps: the mean's standard error is 1/sqrt(n) < 0.6%; 3% is > 5 SE
        assert gaps.size > 25_000
        assert gaps.mean() == pytest.approx(1e9 / want, rel=0.03)
        assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.03)  # exponential: CV 1
        assert _exponential_ks(gaps) < 1.63 * 1.5 / np.sqrt(gaps.size)  # KS, 1% level x 1.5
    bins = np.arange(union[0], union[0] + span, 10_000_000)  # counts per 10 ms
    counts = [np.histogram(s, bins)[0] for s in shares]
    for a, b in itertools.combinations(counts, 2):  # independent shares: no correlation
        assert abs(np.corrcoef(a, b)[0, 1]) < 4 / np.sqrt(bins.size)


@pytest.mark.parametrize("walk", ["own streams", "thinning"])
def test_poisson_shares_pass_the_same_statistical_checks_as_thinning(walk):
    plan, count = _plan(), 3
    shares = [_share(plan, i, count)[0] if walk == "own streams" else _thinned(plan, i, count)
              for i in range(count)]
    union = np.sort(np.concatenate(shares))
    assert union.size > 6 * RATE * 0.95
    _poisson_checks(union, shares, RATE)


def test_own_streams_are_seeded_apart_and_numbered_apart():
    plan = _plan("min_duration_s=1")
    a0, ids0 = _share(plan, 0, 2)
    a1, ids1 = _share(plan, 1, 2)
    assert not np.array_equal(a0[:100], a1[:100])  # not one stream twice
    assert np.array_equal(a0, _share(plan, 0, 2)[0])  # seeded: the same again
    other = _share(_plan("min_duration_s=1", "schedule_rng_seed=99"), 0, 2)[0]
    assert not np.array_equal(a0[:100], other[:100])
    assert ids0[:3] == [0, 2, 4] and ids1[:3] == [1, 3, 5]  # k N + i: never the same id
    assert share_size(plan, 0, 2) == a0.size and share_size(plan, 1, 2) == a1.size


def test_one_process_schedule_is_the_plan_unchanged():
    plan = _plan("min_duration_s=1")
    (offsets, _), ids = share_queries(plan, 0, 1)
    assert ids is None and offsets is not None
    mine = np.concatenate(list(offsets))
    assert np.array_equal(mine, np.concatenate(list(open_loop_offsets(plan))))
    # the same arrivals as before: the seed's own exponential draws, cumulated, in order
    rng = np.random.default_rng(plan.settings.schedule_rng_seed)
    first = np.round(np.cumsum(rng.exponential(1e9 / RATE, CHUNK))).astype(np.int64)
    assert np.array_equal(mine[:CHUNK], first)
    assert list(schedule_offsets(plan))[0].tolist() == first.tolist()


def test_query_counts_divide_exactly_among_the_shares():
    plan = _plan("min_duration_s=0", "min_query_count=10001")
    sizes = [_share(plan, i, 4)[0].size for i in range(4)]
    assert sizes == [2501, 2500, 2500, 2500]  # 10001 measured in all, the first gets one more
    capped = _plan("max_query_count=1002")
    assert sum(_share(capped, i, 4)[0].size for i in range(4)) == 1002


def test_a_constant_rate_splits_by_position_into_the_plan_itself():
    plan = _plan("arrival='constant'", "min_duration_s=0", "min_query_count=10002")
    whole = np.concatenate(list(open_loop_offsets(plan)))
    assert whole.size == 10002
    pairs = sorted(q for i in range(4)
                   for q in zip(_share(plan, i, 4)[1], _share(plan, i, 4)[0].tolist(),
                                strict=True))
    assert [p[0] for p in pairs] == list(range(10002))  # ids are the queries' positions
    assert np.abs(np.array([p[1] for p in pairs]) - whole).max() <= 1  # float rounding only
    assert isinstance(share_process(plan.arrival, 1, 4), ConstantShare)
    assert split_kind(dataclasses.replace(plan, settings=dataclasses.replace(
        plan.settings, workers=4))).startswith("by position")


def test_a_trace_is_still_partitioned_exactly():
    offsets = np.sort(np.random.default_rng(3).integers(0, 5 * 10**9, 7000)).astype(np.int64)
    plan = dataclasses.replace(_plan("min_duration_s=0"), arrival=Trace("t", "0" * 64, offsets))
    assert share_process(plan.arrival, 0, 3) is None
    shares = [_share(plan, i, 3) for i in range(3)]
    union = sorted((i, o) for got, ids in shares for i, o in zip(ids, got.tolist(), strict=True))
    assert union == list(enumerate(offsets.tolist()))  # every recorded arrival once, its id
    assert all(np.array_equal(got, _thinned(plan, i, 3)) for i, (got, _) in enumerate(shares))


def test_gamma_keeps_the_thinning_walk():
    plan = dataclasses.replace(_plan("min_duration_s=1"), arrival=Gamma(RATE, 0.25))
    assert share_process(plan.arrival, 0, 2) is None
    assert np.array_equal(_share(plan, 1, 2)[0], _thinned(plan, 1, 2))


def test_steps_and_bursts_split_into_streams_of_rate_over_n():
    steps = share_process(Steps((0.0, 1.0), (100.0, 400.0), ramp=True), 0, 4)
    assert steps == Steps((0.0, 1.0), (25.0, 100.0), ramp=True)
    assert share_process(Poisson(1000.0), 2, 4) == Poisson(250.0)


def test_a_multi_process_schedule_file_is_the_union_of_the_shares(tmp_path):
    base = _plan("min_duration_s=1")
    plan = dataclasses.replace(base, settings=dataclasses.replace(base.settings, workers=3))
    union = np.sort(np.concatenate([_share(plan, i, 3)[0] for i in range(3)]))
    assert np.array_equal(np.concatenate(list(schedule_offsets(plan))), union)
    saved = save_schedule(plan, tmp_path)
    assert saved["queries"] == union.size
    assert np.array_equal(np.fromfile(tmp_path / SCHEDULE_FILE, dtype="<i8"), union)
