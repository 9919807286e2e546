"""Reports as deltas: their sum is the whole tally exactly, and a report's size follows its
interval, not the run's length."""

import pickle

import numpy as np

from loadgen.record.collect import Collector
from loadgen.record.deltas import TallyDeltas, TallySum
from loadgen.record.histograms import gain, gain_blob, summary_ns
from loadgen.record.jobs import JobRecorder
from loadgen.record.tally import RunTimes, Tally
from loadgen.record.windows import Windows

S = 1_000_000_000
SLO = 5_000_000


def _collector(steps=()) -> Collector:
    c = Collector(SLO, windows=Windows(S, SLO, steps))
    c.started(0, 0)
    return c


def _second(c: Collector, k: int, rng: np.random.Generator, per_second: int = 500) -> None:
    """Queries scheduled in second k: most answered, a few failed."""
    base = k * per_second
    for i in range(per_second):
        qid, due = base + i, k * S + i * (S // per_second)
        c.issued_query(qid, due, due + int(rng.integers(1, 50_000)), 1, True)
        if i % 97 == 0:
            c.failed(qid, due + 1_000, "timeout" if i % 2 else "http_500", f"detail {i % 5}")
        else:
            c.done(qid, due + int(rng.lognormal(14, 1)), components={"queue": 1000 + i})


def _times(k: int) -> RunTimes:
    return RunTimes(0, 0, k * S, k * S, False, 0)


def _same(a: Tally, b: Tally) -> None:
    for k in a.histograms:
        assert summary_ns(a.histograms[k]) == summary_ns(b.histograms[k]), k
        assert np.array_equal(np.ctypeslib.as_array(a.histograms[k].counts),
                              np.ctypeslib.as_array(b.histograms[k].counts)), k
    ea, eb = a.encode(), b.encode()
    for key in ("components", "batch_sizes", "errors_by_kind", "error_messages", "queries",
                "samples", "overlatency", "late", "out_of_range", "last_done_ns", "times"):
        assert ea[key] == eb[key], key
    assert a.windows.width_ns == b.windows.width_ns
    assert [(w.queries, w.good, w.errors) for w in a.windows.timeline] == \
        [(w.queries, w.good, w.errors) for w in b.windows.timeline]
    assert [(w.queries, w.good, w.errors) for w in a.windows.steps] == \
        [(w.queries, w.good, w.errors) for w in b.windows.steps]
    for wa, wb in zip(a.windows.timeline + a.windows.steps,
                      b.windows.timeline + b.windows.steps, strict=True):
        if wb.hist is not None and wb.hist.total_count:  # the windows' histograms too
            assert wa.hist is not None
            assert np.array_equal(np.ctypeslib.as_array(wa.hist.counts),
                                  np.ctypeslib.as_array(wb.hist.counts))


def test_the_sum_of_the_deltas_is_the_whole_tally_exactly():
    rng = np.random.default_rng(7)
    c, deltas, total = _collector(steps=(0, 3 * S)), TallyDeltas(), TallySum()
    for k in range(7):
        _second(c, k, rng)
        if k % 2:  # a report every other second, as a worker does
            total.add(pickle.loads(pickle.dumps(deltas.take(c.tally(_times(k))))))
    total.add(deltas.take(c.tally(_times(7))))  # the last word (DONE)
    _same(total.tally(), c.tally(_times(7)))
    whole = TallySum()  # a whole tally is a delta from nothing
    whole.add(c.tally(_times(7)).encode())
    _same(whole.tally(), c.tally(_times(7)))


def test_the_sum_follows_a_timeline_that_widens():
    rng = np.random.default_rng(3)
    c, deltas, total = _collector(), TallyDeltas(), TallySum()
    for k in (0, 1, 150, 260, 420, 421):  # past MAX_WINDOWS: the timeline widens twice
        _second(c, k, rng, per_second=50)
        total.add(deltas.take(c.tally(_times(k))))
    assert c.windows.width_ns == 4 * S
    _same(total.tally(), c.tally(_times(421)))


def test_a_report_costs_what_its_interval_holds_not_the_run_so_far():
    rng = np.random.default_rng(11)
    c, deltas = _collector(), TallyDeltas()
    sizes = []
    for k in range(120):  # two minutes of reports, one per 2 s
        _second(c, 2 * k, rng)
        _second(c, 2 * k + 1, rng)
        sizes.append(len(pickle.dumps(deltas.take(c.tally(_times(2 * k + 2))))))
    early, late = np.median(sizes[2:12]), np.median(sizes[-10:])
    assert late < 1.25 * early, (early, late)
    whole = len(pickle.dumps(c.tally(_times(240)).encode(lambda h: gain_blob(gain(h, None)))))
    assert whole > 4 * late  # a cumulative report in the same form (~5x here: its windows)


def test_agentic_jobs_figures_sum_exactly():
    c, deltas, total = _collector(), TallyDeltas(), TallySum()
    c.jobs = JobRecorder(deadline_ns=SLO)
    for k in range(4):
        for i in range(10):
            c.jobs.started()
            if i % 4:
                c.jobs.finished((k + 1) * (i + 1) * 1_000_000)
            else:
                c.jobs.failed()
        total.add(pickle.loads(pickle.dumps(deltas.take(c.tally(_times(k))))))
    got, want = total.tally().jobs, c.tally(_times(4)).jobs
    assert got is not None and want is not None
    assert got.counters == want.counters == {"started": 40, "finished": 28, "failed": 12,
                                             "over_deadline": want.counters["over_deadline"]}
    assert want.counters["over_deadline"] > 0
    assert summary_ns(got.time_ns) == summary_ns(want.time_ns)
