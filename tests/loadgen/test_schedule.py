import numpy as np
import pytest

from loadgen.qsl import QuerySampleLibrary, accuracy_queries, sample_chunks
from loadgen.schedule import Constant, Poisson, arrival_for, open_loop_offsets
from loadgen.settings import load_settings


def _settings(*extra):
    return load_settings(None, ["preset='dev'", "target_latency_ms=10", *extra])


def _all(settings, chunk=4096):
    return np.concatenate(list(open_loop_offsets(arrival_for(settings), settings, chunk)))


def test_same_seed_same_schedule_other_seed_differs():
    s = _settings("target_qps=2000")
    a, b = _all(s), _all(s)
    assert np.array_equal(a, b)
    c = _all(_settings("target_qps=2000", "schedule_rng_seed=7"))
    assert not np.array_equal(a[: len(c)], c[: len(a)])


def test_poisson_interarrivals_mean_and_cv():
    rate = 5000.0
    gaps = np.diff(Poisson(rate).next_offsets(np.random.default_rng(1), 0.0, 200_000))
    mean = gaps.mean()
    cv = gaps.std() / mean
    # 200k exponential gaps: standard error of the mean is 1/sqrt(n) = 0.22%
    assert mean == pytest.approx(1e9 / rate, rel=0.01)
    assert cv == pytest.approx(1.0, abs=0.01)


def test_constant_is_periodic():
    offsets = Constant(1000).next_offsets(np.random.default_rng(0), 0.0, 10)
    assert np.allclose(np.diff(offsets), 1e6)


def test_plan_meets_both_minimums_and_stops_there():
    s = _settings("target_qps=1000", "min_duration_s=2", "min_query_count=100", "warmup_s=0.5")
    offsets = _all(s)
    measured = offsets[offsets >= 0.5e9]
    assert offsets[-1] >= 2.5e9 and offsets[-2] < 2.5e9
    assert len(measured) >= 100


def test_query_minimum_dominates_when_larger():
    s = _settings("target_qps=1000", "min_duration_s=0.1", "min_query_count=3000")
    offsets = _all(s)
    assert len(offsets) == 3000


def test_maximums_cap_the_plan():
    s = _settings("target_qps=1000", "min_duration_s=1", "min_query_count=10",
                  "max_query_count=500")
    assert len(_all(s)) == 500
    s = _settings("target_qps=1000", "min_duration_s=1", "min_query_count=10",
                  "max_duration_s=1.5", "max_query_count=0")
    offsets = _all(s)
    assert offsets[-1] <= 1.5e9


def test_chunking_does_not_change_the_schedule():
    s = _settings("target_qps=3000")
    small, large = _all(s, chunk=1000), _all(s, chunk=4096)
    assert len(small) == len(large)
    assert np.abs(small - large).max() <= 1  # float cumsum rounding only


def test_qsl_seeded_selection_and_sample_chunks():
    qsl = QuerySampleLibrary(total=100, performance_count=10, seed=3)
    loaded = qsl.loaded_indices()
    assert len(set(loaded.tolist())) == 10 and np.array_equal(loaded, qsl.loaded_indices())
    chunk = next(sample_chunks(qsl, 8, seed=5, chunk=50))
    assert chunk.shape == (50, 8) and set(chunk.ravel()) <= set(loaded.tolist())
    again = next(sample_chunks(qsl, 8, seed=5, chunk=50))
    assert np.array_equal(chunk, again)


def test_accuracy_queries_cover_every_sample_once():
    queries = accuracy_queries(QuerySampleLibrary(10, 4, 0), 4)
    assert [len(q) for q in queries] == [4, 4, 2]
    assert np.array_equal(np.concatenate(queries), np.arange(10))
