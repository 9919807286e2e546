"""The collector's bulk work: `tidy` flushes a slice of the fullest buffer, losing nothing."""

import numpy as np

from loadgen.record.collect import TIDY_AT, Collector
from loadgen.record.querylog import QueryLog, read_binary
from loadgen.record.histograms import FLUSH_SLICE

MS = 1_000_000


def _feed(c: Collector, queries: int) -> None:
    for q in range(queries):
        c.issued_query(q, q * MS, q * MS + 500, 1, True)
        c.done(q, q * MS + 500 + (q % 97) * 1000)


def test_tidy_flushes_the_fullest_buffer_a_slice_at_a_time():
    c = Collector(slo_ns=50 * MS)
    c.started(0, 0)
    _feed(c, TIDY_AT + 300)
    recorders = [c.latency, c.service_latency, c.issue_lag, c.query_latency]
    assert [r.pending for r in recorders] == [TIDY_AT + 300] * 4
    for left in range(4, 0, -1):
        assert c.tidy()
        assert sorted(r.pending for r in recorders) == [300] * (5 - left) + [TIDY_AT + 300] * (
            left - 1)
    assert not c.tidy()  # nothing holds a whole slice: left for the end of the run
    tally = c.tally()
    assert tally.queries == TIDY_AT + 300
    for name in ("latency_ns", "service_latency_ns", "issue_lag_ns", "query_latency_ns"):
        assert tally.histograms[name].total_count == TIDY_AT + 300
    assert sum(b.queries for b in tally.windows.timeline) == TIDY_AT + 300


def test_tidy_writes_the_query_log_when_it_is_fullest(tmp_path):
    log = QueryLog(tmp_path)
    c = Collector(slo_ns=50 * MS, log=log)
    c.started(0, 0)
    _feed(c, FLUSH_SLICE)
    for recorder in (c.latency, c.service_latency, c.issue_lag, c.query_latency):
        recorder.flush()
    assert c.tidy()
    rows, _ = read_binary(tmp_path)
    assert np.array_equal(rows["query_id"], np.arange(FLUSH_SLICE))
    assert not c.tidy()
    log.close()
