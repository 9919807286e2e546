"""Seeded thinning: the shares partition the plan exactly, each is Poisson, and merged
tallies of the shares equal the whole plan recorded in one process."""

import itertools

import numpy as np
import pytest

from loadgen.plan.plan import RunPlan
from loadgen.plan.schedule import plan_queries, thin
from loadgen.plan.settings import load_settings
from loadgen.record.collect import Collector
from loadgen.record.histograms import summary_ns
from loadgen.record.tally import HISTOGRAMS, RunTimes, merge_tallies

MS = 1_000_000
PLAN = ["preset='dev'", "target_latency_ms=10", "target_qps=5000", "min_duration_s=4",
        "warmup_s=0"]


def _walk(offsets, samples, ids=None):
    """[(id, offset, sample row)] of a plan or share, chunk by chunk as the runner walks it."""
    rows = []
    for chunk in offsets:
        mine = next(samples)
        for o, r in zip(chunk, mine, strict=False):  # a last chunk of samples runs over
            rows.append((None if ids is None else next(ids), int(o), tuple(r)))
    return rows


@pytest.mark.parametrize("count", [2, 3])
def test_thinned_shares_partition_the_plan_exactly(count):
    plan = RunPlan.of(load_settings(None, PLAN))
    whole = [(i, o, r) for i, (_, o, r) in enumerate(_walk(*plan_queries(plan)))]
    assert len(whole) > 8 * 1024  # crosses chunk edges
    shares = []
    for index in range(count):
        (offsets, samples), ids = thin(plan_queries(plan), plan.settings.schedule_rng_seed,
                                       index, count)
        shares.append(_walk(offsets, samples, ids))
    union = sorted(q for share in shares for q in share)
    assert union == whole  # every query once, with its own offset, samples and global id
    for share in shares:  # a random split, not a round robin: about 1/count each
        assert abs(len(share) - len(whole) / count) < 5 * np.sqrt(len(whole) / count)
        assert any(b[0] - a[0] != count for a, b in itertools.pairwise(share))


def test_each_share_of_a_poisson_plan_is_poisson():
    plan = RunPlan.of(load_settings(None, [*PLAN, "min_duration_s=20"]))
    (offsets, _), _ = thin(plan_queries(plan), plan.settings.schedule_rng_seed, 1, 4)
    gaps = np.diff(np.concatenate(list(offsets))).astype(float)
    assert gaps.size > 20_000
    assert abs(gaps.mean() - 4 / 5000 * 1e9) < 0.03 * gaps.mean()  # rate / 4
    assert abs(gaps.std() / gaps.mean() - 1) < 0.03  # exponential gaps: CV 1 (round robin: 0.5)


def test_the_split_is_seeded():
    plan = RunPlan.of(load_settings(None, PLAN))
    other = RunPlan.of(load_settings(None, [*PLAN, "schedule_rng_seed=99"]))

    def ids(p):
        (offsets, _), it = thin(plan_queries(p), p.settings.schedule_rng_seed, 0, 2)
        n = sum(c.size for c in offsets)
        return [next(it) for _ in range(n)]

    assert ids(plan) == ids(plan)
    assert ids(plan)[:200] != ids(other)[:200]


def test_merged_thinned_shares_equal_one_process_recording_the_whole_plan():
    plan = RunPlan.of(load_settings(None, PLAN))
    rng = np.random.default_rng(5)
    offsets = np.concatenate(list(plan_queries(plan)[0]))
    latency = rng.lognormal(np.log(2 * MS), 0.7, offsets.size).astype(np.int64)
    times = RunTimes(0, 0, int(offsets[-1]), int(offsets[-1]) + 100 * MS, False, 0)

    def record(collector, ids):
        collector.started(0, 0)
        for q in ids:
            collector.issued_query(q, int(offsets[q]), int(offsets[q]) + 1000, 1, True)
            collector.done(q, int(offsets[q] + latency[q]))
        return collector.tally(times)

    whole = record(Collector(3 * MS), range(offsets.size))
    parts = []
    for index in range(3):
        (share, _), ids = thin(plan_queries(plan), plan.settings.schedule_rng_seed, index, 3)
        n = sum(c.size for c in share)
        parts.append(record(Collector(3 * MS), [next(ids) for _ in range(n)]))
    merged = merge_tallies(parts)
    for name in HISTOGRAMS:
        assert np.array_equal(np.ctypeslib.as_array(whole.histograms[name].counts),
                              np.ctypeslib.as_array(merged.histograms[name].counts))
        assert summary_ns(whole.histograms[name]) == summary_ns(merged.histograms[name])
    assert (merged.queries, merged.overlatency) == (whole.queries, whole.overlatency)
    assert [(b.queries, b.good) for b in merged.windows.timeline] == [
        (b.queries, b.good) for b in whole.windows.timeline]
