"""llmsim: the continuous-batching cost model gives exact stamps, and the collector's token
metrics equal values computed by hand; the saturated rate matches `capacity_qps`."""

import asyncio

import numpy as np
import pytest

from loadgen.adapters.llmsim import CostModel, LlmSimSut, capacity_qps
from loadgen.adapters.registry import make_sut
from loadgen.adapters.tokens import TokenStream
from loadgen.errors import SutSpecError
from loadgen.record.collect import Collector
from loadgen.record.histograms import summary_ns
from loadgen.record.tally import RunTimes
from tests.loadgen.llm.virtual import VirtualTime, drive

MS, US = 1_000_000, 1_000
MODEL = CostModel(step_base_ns=1 * MS, step_per_seq_ns=100 * US, prefill_per_token_ns=10 * US,
                  max_seqs=2)
TIMES = RunTimes(0, 0, 0, 0, False, 0)


class Streams(Collector):
    """A collector that also keeps each finished stream."""

    def __init__(self) -> None:
        super().__init__(slo_ns=2**62)
        self.streams: dict[int, TokenStream] = {}

    def streamed(self, query_id: int, done_ns: int, stream: TokenStream, components=None,
                 output=None) -> None:
        self.streams[query_id] = stream
        super().streamed(query_id, done_ns, stream, components, output)


def test_a_request_alone_streams_at_the_model_s_times() -> None:
    c, _ = drive(MODEL, [(0, 1)], input_tokens=100, output_tokens=5, collector=Streams())
    assert isinstance(c, Streams)
    ttft, step = 1 * MS + 100 * US + 100 * 10 * US, 1 * MS + 100 * US  # 2.1 ms, 1.1 ms
    assert c.streams[0].chunk_ns == [ttft + i * step for i in range(5)]
    assert c.streams[0].input_tokens == 100 and c.streams[0].output_tokens == 5
    t = c.tally(TIMES)
    assert t.tokens is not None
    h = t.tokens.histograms
    assert summary_ns(h["ttft_ns"])["max"] == pytest.approx(ttft, rel=1e-3)
    assert summary_ns(h["tpot_ns"])["max"] == pytest.approx(step, rel=1e-3)
    assert summary_ns(h["e2e_ns"])["max"] == pytest.approx(ttft + 4 * step, rel=1e-3)
    assert summary_ns(h["itl_ns"])["count"] == 4


def test_a_late_arrival_waits_for_the_iteration_and_then_shares_the_batch() -> None:
    c, _ = drive(MODEL, [(0, 1), (500 * US, 1)], input_tokens=100, output_tokens=3,
                 collector=Streams())
    assert isinstance(c, Streams)
    first, second = c.streams[0].chunk_ns, c.streams[1].chunk_ns
    # iteration 1: [0] alone, 0 -> 2.1 ms; iteration 2 admits [1]: batch 2 and its prefill,
    # 1 + 0.2 + 1 = 2.2 ms -> 4.3 ms; then batch 2 steps of 1.2 ms; [0] leaves after 5.5 ms
    assert first == [2_100 * US, 4_300 * US, 5_500 * US]
    assert second == [4_300 * US, 5_500 * US, 6_600 * US]  # alone again: 1.1 ms


def test_max_seqs_holds_the_third_request_until_a_slot_frees() -> None:
    c, _ = drive(MODEL, [(0, 1), (0, 1), (0, 1)], input_tokens=100, output_tokens=2,
                 collector=Streams())
    assert isinstance(c, Streams)
    # the first arrival begins iteration 1 alone (0 -> 2.1 ms); at 2.1 ms one slot is left:
    # [1] joins (1 + 0.2 + 1 = 2.2 ms -> 4.3), [2] waits for [0] to leave at 4.3
    assert c.streams[0].chunk_ns == [2_100 * US, 4_300 * US]
    assert c.streams[1].chunk_ns == [4_300 * US, 6_500 * US]
    assert c.streams[2].chunk_ns == [6_500 * US, 7_600 * US]  # alone at the end: 1.1 ms


def test_chunks_and_reasoning_shape_the_stream() -> None:
    model = CostModel(step_base_ns=1 * MS, step_per_seq_ns=0, prefill_per_token_ns=0,
                      chunk=2, reasoning=1)
    c, _ = drive(model, [(0, 1)], input_tokens=1, output_tokens=6, collector=Streams())
    assert isinstance(c, Streams)
    s = c.streams[0]
    assert s.chunk_tokens == [1, 2, 2, 1] and s.first_answer == 1
    assert s.chunk_ns == [1 * MS, 3 * MS, 5 * MS, 6 * MS]
    t = c.tally(TIMES)
    assert t.tokens is not None
    itl = summary_ns(t.tokens.histograms["itl_ns"])
    assert (itl["count"], itl["min"]) == (5, 0)
    assert summary_ns(t.tokens.histograms["ttfo_ns"])["max"] == pytest.approx(3 * MS, rel=1e-3)


def test_an_offline_query_reports_each_sample_then_ends() -> None:
    c, _ = drive(MODEL, [(0, 3)], input_tokens=100, output_tokens=2)
    t = c.tally(TIMES)
    assert t.queries == 1 and t.samples == 3
    assert t.tokens is not None and t.tokens.counters["streams"] == 3
    assert t.tokens.counters["output_total"] == 6
    assert t.histograms["latency_ns"].total_count == 3  # each sample's done


def test_saturated_throughput_is_capacity_qps() -> None:
    model = CostModel(step_base_ns=2 * MS, step_per_seq_ns=50 * US, prefill_per_token_ns=5 * US,
                      max_seqs=16)
    capacity = capacity_qps(model, 200, 20)
    gap = int(1e9 / (1.5 * capacity))  # over capacity: the queue never empties
    c, _ = drive(model, [(i * gap, 1) for i in range(3000)], input_tokens=200, output_tokens=20)
    t = c.tally(TIMES)
    assert t.tokens is not None
    e2e_last = t.last_done_ns
    assert t.queries == 3000
    assert 3000 / (e2e_last / 1e9) == pytest.approx(capacity, rel=0.01)


def test_the_spec_builds_the_model_and_names_bad_keys() -> None:
    sut = make_sut("llmsim:step_base=2ms,step_per_seq=50us,prefill_per_token=5us,max_seqs=8,"
                   "chunk=2,reasoning=3,input=50,output=10")
    assert isinstance(sut, LlmSimSut)
    assert sut.model == CostModel(2 * MS, 50 * US, 5 * US, 8, 2, 3)
    assert sut.describe()["default_output_tokens"] == 10
    with pytest.raises(SutSpecError, match="max_seq"):
        make_sut("llmsim:max_seq=3")
    with pytest.raises(SutSpecError, match="at least 1"):
        make_sut("llmsim:max_seqs=0")
    with pytest.raises(SutSpecError, match="not a duration"):
        make_sut("llmsim:step_base=fast")


def test_stopped_sim_drops_its_timers() -> None:
    vt = VirtualTime()
    sut = LlmSimSut(MODEL, 10, 3, clock=vt.clock)
    c = Collector(slo_ns=2**62)
    asyncio.run(sut.start(c, vt))
    c.issued_query(0, 0, 0, 1, True)
    sut.issue(0, np.zeros(1, dtype=np.int64))
    asyncio.run(sut.stop())
    vt.run_until()
    assert c.in_flight == 1
