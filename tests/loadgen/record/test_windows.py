"""Windows of scheduled time: filing, widening, merging, and per-step reports from the engine."""

import numpy as np
import pytest

from loadgen.api import run_async, run_loop
from loadgen.plan.settings import load_settings
from loadgen.record.histograms import percentile_ns
from loadgen.record.tally import RunTimes, Tally
from loadgen.record.windows import (
    MAX_WINDOWS,
    WindowCounts,
    WindowedRecorder,
    Windows,
    merge_windows,
    timeline_report,
)
from loadgen.report.summary import render_summary
from tests.loadgen.fakes import FunctionSut

MS = 1_000_000
S = 1_000_000_000
ORIGIN = 5 * S  # perf_counter times are not zero-based


def _filled(width_ns, when, latency, steps=()):
    w = Windows(width_ns, slo_ns=2 * MS, step_starts_ns=steps)
    w.started(ORIGIN, ORIGIN + S)  # one second of warm-up
    r = WindowedRecorder(w)
    for t, x in zip(when.tolist(), latency.tolist(), strict=True):
        r.add_at(ORIGIN + t, x)
    r.flush()
    return w, r


def test_each_query_lands_in_the_window_of_its_scheduled_time():
    rng = np.random.default_rng(0)
    when = np.sort(rng.uniform(1 * S, 11 * S, 20_000)).astype(np.int64)
    latency = np.where(when < 6 * S, MS, 3 * MS) + rng.integers(0, 1000, when.size)
    w, r = _filled(S, when, latency)
    bins = w.counts().timeline
    assert len(bins) == 10
    counts = np.histogram(when, bins=np.arange(1, 12) * S)[0]
    assert [b.queries for b in bins] == counts.tolist()
    assert [b.good for b in bins] == counts[:5].tolist() + [0] * 5  # SLO 2 ms
    assert all(abs(percentile_ns(b.hist, 50) - MS) < 0.01 * MS for b in bins[:5])
    assert all(abs(percentile_ns(b.hist, 50) - 3 * MS) < 0.03 * MS for b in bins[5:])
    assert r.count == when.size  # the recorder's own histogram got every value too
    report = timeline_report(w.counts(), lead_s=1.0)
    assert report[0]["start_s"] == 1.0 and report[-1]["end_s"] == 11.0
    assert set(report[0]) == {"start_s", "end_s", "queries", "good", "errors", "latency_ns"}
    assert set(report[0]["latency_ns"]) >= {"p50", "p99", "p999", "mean", "max", "count"}


def test_the_timeline_widens_to_stay_bounded_and_loses_nothing():
    when = np.arange(0, 10 * S, 2 * MS, dtype=np.int64) + S  # 10 s at 500/s
    latency = np.full(when.size, MS)
    w, _ = _filled(10 * MS, when, latency)  # 1000 windows of 10 ms asked for
    counts = w.counts()
    assert counts.width_ns == 80 * MS and len(counts.timeline) <= MAX_WINDOWS
    assert sum(b.queries for b in counts.timeline) == when.size
    assert sum(b.hist.total_count for b in counts.timeline) == when.size
    assert {b.queries for b in counts.timeline[:-1]} == {40}


def test_errors_and_steps():
    when = np.array([1, 2, 4, 7], dtype=np.int64) * S
    w, _ = _filled(S, when, np.full(4, MS), steps=(0, 3 * S, 6 * S))
    w.error(ORIGIN + 5 * S)
    counts = w.counts()
    assert [b.queries for b in counts.steps] == [2, 1, 1]
    assert [b.errors for b in counts.steps] == [0, 1, 0]
    assert counts.timeline[4].errors == 1


def test_plain_add_is_refused():
    with pytest.raises(TypeError, match="add_at"):
        WindowedRecorder(Windows(S, MS)).add(5)


def test_windows_merge_exactly_across_widths_and_encode_losslessly():
    rng = np.random.default_rng(3)
    when = np.sort(rng.uniform(S, 5 * S, 6000)).astype(np.int64)
    latency = rng.integers(MS, 9 * MS, when.size)
    whole, _ = _filled(100 * MS, when, latency, steps=(0, 3 * S))
    halves = [_filled(w, when[i::2], latency[i::2], steps=(0, 3 * S))[0].counts()
              for i, w in enumerate([100 * MS, 400 * MS])]
    merged = merge_windows([WindowCounts.decode(h.encode()) for h in halves])
    assert merged.width_ns == 400 * MS
    coarse = merge_windows([whole.counts(), merged])  # whole widened to 400 ms, plus merged
    for a, b in zip(merged.timeline, coarse.timeline, strict=True):
        assert b.queries == 2 * a.queries
        assert np.array_equal(2 * np.ctypeslib.as_array(a.hist.counts),
                              np.ctypeslib.as_array(b.hist.counts))
    assert [b.queries for b in merged.steps] == [b.queries for b in whole.counts().steps]


def test_a_step_plan_changes_the_rate_and_reports_each_step():
    start = []

    def respond(q, samples, now):  # slow (20 ms) while the second step runs, else 1 ms
        start.append(now)
        return [20 * MS if 0.4 * S <= now - start[0] < 0.8 * S else MS]

    settings = load_settings(None, [
        "preset='dev'", "arrival='steps'", "steps=[[0, 200], [0.4, 800], [0.8, 400]]",
        "target_latency_ms=15", "warmup_s=0.1", "min_duration_s=1.1", "min_query_count=10",
        "window_s=0.2"])
    r = run_loop(run_async(settings, FunctionSut(respond)))
    steps = r.stats.steps
    assert [s["step"] for s in steps] == [0, 1, 2]
    assert [s["target_qps"] for s in steps] == [200, 800, 400]
    assert [s["start_s"] for s in steps] == [0, 0.4, 0.8]
    assert steps[0]["measured_s"] == pytest.approx(0.3)  # warm-up excluded
    # Poisson counts over 0.3 / 0.4 / 0.4 s: 60, 320, 160 expected; generous for noise
    for s, expected in zip(steps, [60, 320, 160], strict=True):
        assert s["queries"] + s["errors"] == pytest.approx(expected, rel=0.5)
        assert s["qps_scheduled"] == pytest.approx(s["target_qps"], rel=0.5)
    assert steps[1]["queries"] > 2 * steps[0]["queries"]
    # the slow step is the middle one, judged by scheduled time (margins for a busy host)
    assert steps[1]["latency_ns"]["p50"] >= 20 * MS
    assert steps[0]["latency_ns"]["p50"] < 10 * MS and steps[2]["latency_ns"]["p50"] < 10 * MS
    assert steps[1]["goodput_qps"] < 0.5 * steps[1]["qps_scheduled"]
    assert sum(s["queries"] for s in steps) == r.stats.queries
    timeline = r.stats.timeline
    assert timeline[0]["start_s"] == pytest.approx(0.1)
    assert sum(w["queries"] for w in timeline) == r.stats.queries
    assert "Steps (s from start" in render_summary(r)


def test_tally_encodes_and_decodes_losslessly():
    from loadgen.record.collect import Collector

    c = Collector(2 * MS)
    c.started(0, 0)
    for q in range(300):
        c.issued_query(q, q * MS, q * MS + 10, 1, True)
        if q % 10:
            c.done(q, q * MS + (q % 7) * MS, components={"queue": 5, "batch_size": 2})
        else:
            c.failed(q, q * MS + 1, "boom")
    t = c.tally(RunTimes(0, 0, 300 * MS, 301 * MS, False, 0))
    again = Tally.decode(t.encode())
    assert again.encode() == t.encode()
    assert again.queries == 270 and again.errors_by_kind == {"boom": 30}
    assert sum(b.errors for b in again.windows.timeline) == 30


def test_an_error_that_widens_the_timeline_lands_in_the_widened_window():
    w, _ = _filled(S, np.array([S], dtype=np.int64), np.array([MS]))
    w.error(ORIGIN + S + 450 * S)  # window 450 > MAX_WINDOWS: widen to 4 s
    counts = w.counts()
    assert counts.width_ns == 4 * S
    assert counts.timeline[112].errors == 1 and counts.timeline[0].queries == 1
