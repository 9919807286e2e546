"""The collector's token side: every metric of hand-built streams equals the hand-computed value,
failed streams keep their partial timings, and tallies merge exactly."""

import dataclasses

import pytest

from loadgen.adapters.tokens import TokenStream
from loadgen.judge.stats import RunStats, summarize
from loadgen.judge.tokenstats import CacheFigures, HitRate, Reasoning
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import settings_from_mapping
from loadgen.plan.tokenslo import TokenSlos
from loadgen.record.collect import Collector
from loadgen.record.histograms import BUFFER_CAPACITY, Recorder, summary_ns
from loadgen.record.tally import RunTimes, Tally, merge_tallies
from loadgen.record.tokens import TokenRecorder

TIMES = RunTimes(0, 0, 10_000, 10_000, False, 0)


def _stream(chunks: list[tuple[int, int]], *, first_answer: int | None = 0,
            server: int | None = None, client: int = 0, input_tokens: int | None = None,
            ) -> TokenStream:
    s = TokenStream()
    for i, (t, k) in enumerate(chunks):
        s.add(t, k, answer=first_answer is not None and i >= first_answer)
    s.server_output_tokens, s.client_tokens, s.input_tokens = server, client, input_tokens
    return s


def _values(tally: Tally, name: str) -> dict[str, int]:
    assert tally.tokens is not None
    return summary_ns(tally.tokens.histograms[name])


def test_one_stream_gives_every_metric_exactly() -> None:
    c = Collector(slo_ns=10**9)
    c.started(0, 0)
    c.issued_query(7, 0, 100, 1, True)
    # reasoning chunk of 1 token at 1000, answer chunk of 3 tokens at 1300, 1 token at 2000
    # (values below 2048 ns sit in HDR buckets of width 1: exact)
    stream = _stream([(1000, 1), (1300, 3), (2000, 1)], first_answer=1, input_tokens=12)
    c.streamed(7, 2040, stream)
    t = c.tally(TIMES)
    assert t.queries == 1 and t.tokens is not None
    assert _values(t, "ttft_ns")["max"] == 1000 and _values(t, "ttft_sent_ns")["max"] == 900
    assert _values(t, "ttfo_ns")["max"] == 1300 and _values(t, "ttfo_sent_ns")["max"] == 1200
    assert _values(t, "e2e_ns")["max"] == 2000 and _values(t, "e2e_sent_ns")["max"] == 1900
    itl = _values(t, "itl_ns")  # 300 then two zero gaps (same chunk), then 700: N - 1 = 4
    assert (itl["count"], itl["min"], itl["max"], itl["mean"]) == (4, 0, 700, 250)
    assert _values(t, "tpot_ns")["max"] == (2000 - 1000) // 4
    gaps = _values(t, "chunk_gap_ns")
    assert (gaps["count"], gaps["min"], gaps["max"]) == (2, 300, 700)
    assert _values(t, "stall_ns")["max"] == 700
    assert _values(t, "normalized_ns")["max"] == 400
    assert _values(t, "output_tokens")["max"] == 5 and _values(t, "input_tokens")["max"] == 12
    assert t.tokens.counters["output_total"] == 5 and t.tokens.counters["input_total"] == 12
    assert t.histograms["latency_ns"].get_max_value() == 2040  # the query itself, as before


def test_a_one_token_output_has_no_tpot_and_no_itl() -> None:
    c = Collector(slo_ns=10**9)
    c.issued_query(1, 0, 0, 1, True)
    c.streamed(1, 900, _stream([(800, 1)]))
    t = c.tally(TIMES)
    assert _values(t, "tpot_ns")["count"] == 0 and _values(t, "itl_ns")["count"] == 0
    assert _values(t, "ttft_ns")["max"] == 800 and _values(t, "e2e_ns")["max"] == 800


def test_a_failed_stream_keeps_its_first_token_and_gaps_but_not_e2e() -> None:
    c = Collector(slo_ns=10**9)
    c.issued_query(1, 0, 10, 1, True)
    c.failed(1, 5000, "stream_cut", "peer closed", stream=_stream([(700, 1), (900, 2)]))
    t = c.tally(TIMES)
    assert t.errors_by_kind == {"stream_cut": 1} and t.queries == 0
    assert _values(t, "ttft_ns")["max"] == 700
    assert _values(t, "itl_ns")["count"] == 2
    assert _values(t, "e2e_ns")["count"] == 0 and _values(t, "tpot_ns")["count"] == 0
    assert t.tokens is not None
    assert (t.tokens.counters["failed"], t.tokens.counters["partial"]) == (1, 1)


def test_warm_up_streams_are_not_recorded() -> None:
    c = Collector(slo_ns=10**9, tokens=TokenRecorder())
    c.issued_query(1, 0, 0, 1, False)
    c.streamed(1, 900, _stream([(800, 2)]))
    t = c.tally(TIMES)
    assert t.tokens is not None and t.tokens.counters["streams"] == 0


def test_goodput_counts_requests_meeting_every_slo_and_errors_as_misses() -> None:
    slos = TokenSlos(ttft_ns=1000, tpot_ns=100)
    c = Collector(slo_ns=10**9, tokens=TokenRecorder(slos, TokenSlos(ttft_ns=1000, tpot_ns=100)))
    c.issued_query(1, 0, 0, 1, True)
    c.streamed(1, 2000, _stream([(900, 1), (1000, 1), (1100, 1)]))  # ttft 900, tpot 100: good
    c.issued_query(2, 0, 0, 1, True)
    c.streamed(2, 2000, _stream([(1100, 1), (1150, 1)]))  # ttft 1100: over
    c.issued_query(3, 0, 0, 1, True)
    c.streamed(3, 2000, _stream([(500, 1), (800, 1)]))  # tpot 300: over
    c.issued_query(4, 0, 0, 1, True)
    c.failed(4, 3000, "http_500")  # a miss
    t = c.tally(TIMES)
    assert t.tokens is not None
    counters = t.tokens.counters
    assert (counters["good"], counters["good_tokens"]) == (1, 3)
    assert (counters["ttft_over"], counters["ttft_requests"]) == (1, 3)
    assert (counters["tpot_over"], counters["tpot_requests"]) == (1, 3)
    plan = RunPlan.of(settings_from_mapping({"scenario": "Server", "target_latency_ms": 1.0}))
    plan = dataclasses.replace(plan, goodput_slos=slos)
    stats = summarize(plan, t)
    assert stats.token_stats is not None
    goodput = stats.token_stats.goodput
    assert (goodput.good, goodput.attempted, goodput.attainment) == (1, 4, 0.25)
    assert goodput.slos_ms == {"ttft": 0.001, "tpot": 0.0001}


def test_client_and_server_counts_are_compared() -> None:
    c = Collector(slo_ns=10**9)
    for q, (client, server) in enumerate([(10, 10), (9, 12)]):
        c.issued_query(q, 0, 0, 1, True)
        c.streamed(q, 100, _stream([(50, client)], server=server, client=client))
    t = c.tally(TIMES)
    assert t.tokens is not None
    k = t.tokens.counters
    assert (k["compared"], k["client_total"], k["server_total"], k["mismatched"],
            k["abs_diff_total"], k["output_total"]) == (2, 19, 22, 1, 3, 22)


def _tally(offset: int) -> Tally:
    c = Collector(slo_ns=10**9)
    c.issued_query(1, 0, 0, 1, True)
    c.streamed(1, 5000, _stream([(1000 + offset, 1), (2000 + offset, 2)]))
    return c.tally(TIMES)


def test_token_tallies_encode_decode_and_merge_exactly() -> None:
    a, b = _tally(0), _tally(500)
    round_trip = Tally.decode(a.encode())
    assert round_trip.tokens is not None and a.tokens is not None
    assert round_trip.tokens.counters == a.tokens.counters
    merged = merge_tallies([a, b, Tally.decode(_plain().encode())])
    assert merged.tokens is not None
    assert _values(merged, "ttft_ns")["count"] == 2
    assert (_values(merged, "ttft_ns")["min"], _values(merged, "ttft_ns")["max"]) == (1000, 1500)
    assert merged.tokens.counters["output_total"] == 6
    assert merge_tallies([_plain(), _plain()]).tokens is None


def _plain() -> Tally:
    c = Collector(slo_ns=10**9)
    c.issued_query(1, 0, 0, 1, True)
    c.done(1, 100)
    return c.tally(TIMES)


def test_result_keys_read_back() -> None:
    plan = RunPlan.of(settings_from_mapping({"scenario": "Server", "target_latency_ms": 1.0}))
    stats = summarize(plan, _tally(0))
    doc = stats.as_dict()
    for key in ("ttft_ns", "ttfo_ns", "tpot_ns", "itl_ns", "e2e_ns", "tokens", "goodput"):
        assert key in doc
    assert doc["ttft_ns"]["p99"] == 1000 and doc["ttft_ns"]["from_send"]["count"] == 1
    assert "from_send" not in doc["tpot_ns"]
    assert doc["tokens"]["output_total"] == 3
    assert doc["tokens"]["output_per_s"] == pytest.approx(3 / stats.duration_s)
    assert RunStats.from_dict(doc).token_stats == stats.token_stats
    assert summarize(plan, _plain()).token_stats is None
    assert "ttft_ns" not in summarize(plan, _plain()).as_dict()


def test_recorder_extend_records_what_add_would() -> None:
    one, many = Recorder(), Recorder()
    blocks = [[i * 7 % 5000 for i in range(k)] for k in (3, 1000, 2000, 250)] * 12
    for block in blocks:
        for v in block:
            one.add(v)
        many.extend(block)
    assert many.pending < BUFFER_CAPACITY
    a, b = one.histogram, many.histogram
    assert summary_ns(a) == summary_ns(b) and a.total_count == sum(map(len, blocks))
    odd = Recorder()
    odd.extend([5, -1, 2**70])  # negative and beyond int64: counted, not recorded
    assert (odd.count, odd.out_of_range) == (1, 2)


def test_token_gaps_of_mixed_chunks_one_stream_at_a_time() -> None:
    c = Collector(slo_ns=10**9)
    c.issued_query(1, 0, 0, 1, True)
    # chunks of 2, 1, 3 tokens at 100, 400, 1000: gaps 0 | 300 | 600, 0, 0
    c.streamed(1, 1000, _stream([(100, 2), (400, 1), (1000, 3)]))
    t = c.tally(TIMES)
    itl = _values(t, "itl_ns")
    assert (itl["count"], itl["min"], itl["max"], itl["mean"]) == (5, 0, 600, 180)
    assert _values(t, "stall_ns")["max"] == 600


def test_cached_and_reasoning_tokens_total_over_the_requests_that_report_them() -> None:
    c = Collector(slo_ns=10**9)
    reports = [(100, 60, 5), (100, 20, None), (50, None, None)]  # prompt, cached, reasoning
    for q, (prompt, cached, reasoning) in enumerate(reports):
        stream = _stream([(50, 3)])
        stream.input_tokens, stream.cached_tokens = prompt, cached
        stream.reasoning_tokens = reasoning
        c.issued_query(q, 0, 0, 1, True)
        c.streamed(q, 100, stream)
    plan = RunPlan.of(settings_from_mapping({"scenario": "Server", "target_latency_ms": 1.0}))
    stats = summarize(plan, c.tally(TIMES))
    assert stats.token_stats is not None
    tokens = stats.token_stats.tokens
    assert tokens.cache == CacheFigures(80, 2, 200, HitRate(None, 0.4))
    assert tokens.reasoning == Reasoning(reasoning_tokens_total=5, requests_reporting=1)
    assert RunStats.from_dict(stats.as_dict()).token_stats == stats.token_stats
    doc = stats.as_dict()["tokens"]
    del doc["cache"], doc["reasoning"]  # a result written before these blocks existed
    old = type(tokens).from_dict(doc)
    assert old.cache.hit_rate.achieved is None and old.reasoning is None
    assert old.as_dict()["reasoning"] == {}  # written back as it was read


def test_token_latencies_gain_error_adjusted_tails() -> None:
    c = Collector(slo_ns=10**9)
    for q in range(98):  # TTFT q+1 us, two tokens 1 us apart
        c.issued_query(q, 0, 0, 1, True)
        c.streamed(q, 10_000, _stream([(1000 * (q + 1), 1), (1000 * (q + 1) + 1000, 1)]))
    c.issued_query(98, 0, 0, 1, True)
    c.failed(98, 5000, "stream_cut", stream=_stream([(500, 1)]))  # a TTFT, then cut
    c.issued_query(99, 0, 0, 1, True)
    c.failed(99, 5000, "http_500")  # nothing at all
    plan = RunPlan.of(settings_from_mapping({"scenario": "Server", "target_latency_ms": 1.0}))
    stats = summarize(plan, c.tally(TIMES))
    assert stats.token_stats is not None
    doc = stats.as_dict()
    # TTFT: 99 values (the cut stream's included) and 1 missing: the p99 of all 100 is the
    # 99th value, the slowest that arrived, where the finished-only p99 is the 98th
    assert doc["ttft_ns"]["p99_error_adjusted"] == doc["ttft_ns"]["max"] > doc["ttft_ns"]["p99"]
    assert doc["e2e_ns"]["p99_error_adjusted"] is None  # 2 of 100 never finished
    assert doc["tpot_ns"]["p90_error_adjusted"] >= doc["tpot_ns"]["p90"]
    assert "p99_error_adjusted" not in doc["itl_ns"]  # per token: not adjusted
    assert RunStats.from_dict(doc).token_stats == stats.token_stats
