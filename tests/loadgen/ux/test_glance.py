"""The glance a progress report carries: running p50/p99 from the values still buffered and
the recent windows, the share within the SLO, issue lag and errors, without a flush."""

from __future__ import annotations

import json

import numpy as np

from loadgen.record.collect import Collector
from loadgen.record.glance import (
    Glance,
    _inverted_cdf,
    decode_glance,
    encode_glance,
    glance,
    merge_glances,
)

MS = 1_000_000


def _collector(latencies_ms: list[int], lag_ns: int = 5_000) -> Collector:
    """One query per ms of scheduled time, answered after the given latencies."""
    c = Collector(slo_ns=10 * MS)
    c.started(0, 0)
    for i, latency in enumerate(latencies_ms):
        c.issued_query(i, i * MS, i * MS + lag_ns, 1, True)
        c.done(i, i * MS + latency * MS)
    return c


def test_nothing_answered_yet_reads_unknown() -> None:
    c = Collector(slo_ns=10 * MS)
    c.started(0, 0)
    assert glance(c) == Glance(None, None, None, None, ())


def test_buffered_values_give_the_running_percentiles_without_a_flush() -> None:
    c = _collector([1] * 98 + [20, 30])
    pending = c.query_latency.pending
    g = glance(c)
    assert c.query_latency.pending == pending == 100  # nothing was flushed
    assert g.p50_ns is not None and g.p99_ns is not None
    assert MS <= g.p50_ns < 1.01 * MS and 20 * MS <= g.p99_ns < 20.1 * MS
    assert g.within_slo == 0.98 and g.issue_lag_p99_ns == 5_000


def test_filed_windows_count_too_and_the_worst_recent_one_governs() -> None:
    c = _collector([1] * 1500 + [50] * 30 + [1] * 2470)  # 1 s windows: the spike in the 2nd
    while c.tidy():  # the engine's slack files the buffers into windows
        pass
    g = glance(c)
    assert g.within_slo is not None and abs(g.within_slo - 3970 / 4000) < 1e-9
    assert g.p99_ns is not None and 1 * MS <= g.p99_ns < 1.01 * MS  # the spike has passed
    assert g.issue_lag_p99_ns is not None and 5_000 <= g.issue_lag_p99_ns < 5_100


def test_errors_come_by_kind() -> None:
    c = _collector([1, 1])
    for i, kind in ((2, "timeout"), (3, "http_503"), (4, "timeout")):
        c.issued_query(i, i * MS, i * MS, 1, True)
        c.failed(i, i * MS + MS, kind)
    assert glance(c).errors_by_kind == (("http_503", 1), ("timeout", 2))


def test_several_processes_merge_to_the_worst_figures_and_summed_errors() -> None:
    a = Glance(MS, 5 * MS, 0.99, 10_000, (("timeout", 1),))
    b = Glance(2 * MS, 3 * MS, 0.97, None, (("timeout", 2), ("http_503", 1)))
    assert merge_glances([a, b]) == Glance(2 * MS, 5 * MS, 0.97, 10_000,
                                           (("http_503", 1), ("timeout", 3)))
    assert merge_glances([Glance(None, None, None, None)]) == Glance(None, None, None, None)


def test_a_glance_survives_its_plain_encoding():
    g = Glance(2 * MS, 5 * MS, 0.97, 10_000, (("http_503", 2), ("timeout", 1)))
    assert decode_glance(json.loads(json.dumps(encode_glance(g)))) == g
    empty = Glance(None, None, None, None)
    assert decode_glance(encode_glance(empty)) == empty


def test_the_buffered_percentiles_are_numpys_inverted_cdf():
    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 7, 100, 101, 999, 16_384):
        values = rng.integers(0, 10**6, n, dtype=np.int64)
        want = [int(v) for v in np.percentile(values, [0.0, 50.0, 99.0, 100.0],
                                              method="inverted_cdf")]
        assert _inverted_cdf(values.copy(), (0.0, 50.0, 99.0, 100.0)) == want, n
