"""The collector: `tidy` flushes a slice of the fullest buffer, losing nothing; late answers
and error kinds are counted once, and boundedly."""

from pathlib import Path

import numpy as np

from loadgen.record.collect import BULK_SAMPLES, MAX_ERROR_KINDS, TIDY_AT, Collector
from loadgen.record.histograms import FLUSH_SLICE
from loadgen.record.querylog import QueryLog, read_binary
from loadgen.record.tally import RunTimes

MS = 1_000_000
TIMES = RunTimes(0, 0, 0, 0, False, 0)


def _feed(c: Collector, queries: int) -> None:
    for q in range(queries):
        c.issued_query(q, q * MS, q * MS + 500, 1, True)
        c.done(q, q * MS + 500 + (q % 97) * 1000)


def test_tidy_flushes_the_fullest_buffer_a_slice_at_a_time() -> None:
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
    tally = c.tally(TIMES)
    assert tally.queries == TIDY_AT + 300
    for name in ("latency_ns", "service_latency_ns", "issue_lag_ns", "query_latency_ns"):
        assert tally.histograms[name].total_count == TIDY_AT + 300
    assert sum(b.queries for b in tally.windows.timeline) == TIDY_AT + 300


def test_tidy_writes_the_query_log_when_it_is_fullest(tmp_path: Path) -> None:
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


def test_an_answer_after_its_query_timed_out_or_failed_is_late_and_counted_once() -> None:
    finished: list[int] = []
    c = Collector(slo_ns=50 * MS, query_timeout_ns=10 * MS, on_finish=finished.append)
    c.started(0, 0)
    for q in range(3):
        c.issued_query(q, q * MS, q * MS + 100, 1, True)
    c.expire(10 * MS)  # query 0's deadline: it fails as a timeout
    c.failed(1, 11 * MS, "boom")
    c.done(2, 12 * MS)
    assert (c.in_flight, c.finished, c.late) == (0, 3, 0)
    c.done(0, 20 * MS)  # the timed-out query's answer arrives after all
    c.done(1, 21 * MS)  # an answer to a query that already failed
    c.failed(2, 22 * MS, "boom")  # a failure of a query that already succeeded
    c.done(2, 23 * MS)  # and a second answer
    assert c.late == 4 and c.finished == 3 and finished == [10 * MS, 11 * MS, 12 * MS]
    tally = c.tally(TIMES)
    assert tally.late == 4
    assert tally.errors_by_kind == {"timeout": 1, "boom": 1}  # no second error for query 2
    assert tally.queries == 1 and tally.histograms["query_latency_ns"].total_count == 1
    assert tally.last_done_ns == 12 * MS  # the late answers recorded nothing
    assert sum(b.errors for b in tally.windows.timeline) == 2


def test_error_kinds_are_capped_and_the_rest_counted_as_other() -> None:
    c = Collector(slo_ns=MS)
    c.started(0, 0)
    kinds = [f"kind_{i}" for i in range(MAX_ERROR_KINDS + 5)]
    for q, kind in enumerate([*kinds, "kind_0", "kind_70"]):
        c.issued_query(q, q * MS, q * MS, 1, True)
        c.failed(q, q * MS + 1, kind)
    errors = c.tally(TIMES).errors_by_kind
    assert set(errors) == set(kinds[:MAX_ERROR_KINDS]) | {"other"}
    assert errors["other"] == 6  # five new kinds past the cap, then kind_70 again
    assert errors["kind_0"] == 2  # a kind seen before the cap keeps its own count
    assert sum(errors.values()) == len(kinds) + 2  # nothing dropped


def test_an_out_of_memory_failure_is_its_own_kind() -> None:
    c = Collector(slo_ns=10**9)
    for q, detail in enumerate(["HTTP 500: CUDA out of memory. Tried to allocate 2 GiB",
                                "torch.OutOfMemoryError: ...", "HTTP 500: boom"]):
        c.issued_query(q, 0, 0, 1, True)
        c.failed(q, 10, "http_500", detail)
    assert dict(c.errors_by_kind) == {"out_of_memory": 2, "http_500": 1}


def test_an_offline_querys_per_sample_finish_times_are_recorded_in_bulk_exactly() -> None:
    c = Collector(slo_ns=50 * MS)
    c.started(0, 0)
    count = BULK_SAMPLES * 10 + 3
    done = 1_000 + np.arange(count, dtype=np.int64) * 7_000  # as an array, one a sample
    c.issued_query(0, 1_000, 1_500, count, True)
    c.done(0, int(done[-1]), sample_done_ns=done)
    c.issued_query(1, 2_000, 2_500, 3, True)  # a few: one at a time, the same figures
    c.done(1, 9_000, sample_done_ns=[5_000, 7_000, 9_000])
    latency = c.tally(TIMES).histograms["latency_ns"]
    assert latency.total_count == count + 3 and c.measured_samples == count + 3
    assert latency.get_min_value() == 0
    assert latency.get_max_value() == latency.get_highest_equivalent_value(int(done[-1]) - 1_000)
    assert latency.get_count_at_value(7_000) == 2  # one from each query
