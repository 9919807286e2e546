"""Multi-turn sessions: each later turn is sent a think time after the previous answer, its
prompt grown by the history, and timed from its own schedule; per-turn figures."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.adapters.llmsim import CostModel, LlmSimSut
from loadgen.adapters.tokens import TokenStream, Turn
from loadgen.api import run_test
from loadgen.engine.conversations import FOLLOW_UP_IDS, Conversations
from loadgen.errors import SettingsError, SutError
from loadgen.plan.lengths import LengthDist
from loadgen.plan.settings import settings_from_mapping
from loadgen.plan.turns import SessionDraws, SessionShape
from loadgen.record.collect import Collector
from loadgen.record.histograms import summary_ns
from loadgen.record.querylog import read_binary
from loadgen.record.tally import RunTimes
from loadgen.report.summary import render_summary
from tests.loadgen.llm.virtual import VirtualTime

MS, US = 1_000_000, 1_000
MODEL = CostModel(step_base_ns=1 * MS, step_per_seq_ns=100 * US, prefill_per_token_ns=10 * US,
                  max_seqs=4)
TIMES = RunTimes(0, 0, 0, 0, False, 0)


class Streams(Collector):
    """A collector that keeps each finished stream with its scheduled time."""

    def __init__(self) -> None:
        super().__init__(slo_ns=2**62)
        self.streams: dict[int, tuple[int, TokenStream]] = {}

    def streamed(self, query_id: int, done_ns: int, stream: TokenStream, components=None,
                 output=None) -> None:
        self.streams[query_id] = (self._inflight[query_id][0], stream)
        super().streamed(query_id, done_ns, stream, components, output)


def lone_session(turns: int, think_ms: float, input_tokens: int, output_tokens: int
                 ) -> Streams:
    """One session on llmsim in virtual time, its turns sent by `Conversations`."""
    vt = VirtualTime()
    sut = LlmSimSut(MODEL, input_tokens, output_tokens, clock=vt.clock)
    c = Streams()
    asyncio.run(sut.start(c, vt))
    ids = iter(range(FOLLOW_UP_IDS, FOLLOW_UP_IDS + 100))

    def send(scheduled: int, sample: int, turn: Turn, measured: bool) -> None:
        query_id = next(ids)
        c.issued_query(query_id, scheduled, vt.now, 1, measured)
        sessions.sent(query_id, sample, turn, measured)

    shape = SessionShape(LengthDist("fixed", turns), think_ms, 1)
    sessions = Conversations(shape, sut, vt.call_at_ns, send, lambda: False)
    c.on_end = sessions.ended
    c.issued_query(0, 0, 0, 1, True)
    sessions.begin(0, 0, True)
    vt.run_until()
    assert sessions.pending == 0 and c.in_flight == 0
    return c


def test_a_lone_sessions_turns_take_the_prefill_of_their_grown_prompts() -> None:
    c = lone_session(turns=3, think_ms=2.5, input_tokens=100, output_tokens=5)
    step = 1 * MS + 100 * US  # a lone sequence's iteration: base + one sequence
    assert len(c.streams) == 3
    done = 0
    for k, (query_id, (scheduled, stream)) in enumerate(sorted(c.streams.items()), 1):
        # turn k's input: every earlier prompt and answer, then its own 100 tokens
        grown = 100 * k + 5 * (k - 1)
        assert stream.turn == k and stream.input_tokens == grown
        if k > 1:
            assert query_id >= FOLLOW_UP_IDS
            assert scheduled == done + int(2.5 * MS)  # the previous answer's end + think
        ttft = step + grown * 10 * US
        assert stream.chunk_ns[0] - scheduled == ttft
        assert stream.chunk_ns == [scheduled + ttft + i * step for i in range(5)]
        done = stream.chunk_ns[-1]
    t = c.tally(TIMES)
    assert t.tokens is not None
    turns = t.tokens.turns
    assert sorted(turns) == [1, 2, 3]
    for k in (1, 2, 3):
        grown = 100 * k + 5 * (k - 1)
        ttft = summary_ns(turns[k]["ttft_ns"])
        assert ttft["count"] == 1
        assert ttft["max"] == pytest.approx(step + grown * 10 * US, rel=1e-3)
        assert summary_ns(turns[k]["tpot_ns"])["max"] == pytest.approx(step, rel=1e-3)


def test_a_single_turn_session_sends_nothing_more() -> None:
    c = lone_session(turns=1, think_ms=0, input_tokens=10, output_tokens=2)
    assert list(c.streams) == [0]


def test_the_tally_carries_the_turns_through_encode_and_merge() -> None:
    c = lone_session(turns=2, think_ms=0, input_tokens=10, output_tokens=3)
    tokens = c.tally(TIMES).tokens
    assert tokens is not None
    again = type(tokens).decode(json.loads(json.dumps(tokens.encode())))
    merged = type(tokens).merge([again, tokens])
    assert summary_ns(merged.turns[2]["ttft_ns"])["count"] == 2
    assert summary_ns(merged.turns[1]["tpot_ns"])["count"] == 2


def test_draws_are_seeded_and_think_times_in_ms() -> None:
    shape = SessionShape(LengthDist("uniform", 3, min=2, max=4),
                         LengthDist("uniform", 15, min=10, max=20), 7)
    a, b = SessionDraws(shape), SessionDraws(shape)
    turns = [a.turns() for _ in range(50)]
    assert turns == [b.turns() for _ in range(50)] and set(turns) == {2, 3, 4}
    thinks = [a.think_ns() for _ in range(50)]
    assert all(10 * MS <= t <= 20 * MS and t % MS == 0 for t in thinks)
    assert SessionDraws(SessionShape(LengthDist("fixed", 2), 1.5, 7)).think_ns() == 1_500_000


def test_settings_are_checked() -> None:
    base = {"input_tokens": 8, "target_latency_ms": 100}
    s = settings_from_mapping(base | {"turns": {"dist": "uniform", "min": 2, "max": 4},
                                      "think_time_ms": {"dist": "uniform", "min": 5, "max": 9}})
    assert s.as_dict()["turns"] == {"dist": "uniform", "min": 2, "max": 4}
    with pytest.raises(SettingsError, match="turns: multi-turn sessions start open loop"):
        settings_from_mapping(base | {"turns": 2, "scenario": "SingleStream"})
    with pytest.raises(SettingsError, match="think_time_ms: must be"):
        settings_from_mapping(base | {"turns": 2, "think_time_ms": -1})
    with pytest.raises(SettingsError, match="think_time_ms: a think time comes between"):
        settings_from_mapping(base | {"think_time_ms": 100})
    with pytest.raises(SettingsError, match="need a token workload"):
        settings_from_mapping({"turns": 2, "target_latency_ms": 100})


def settings(**more: object) -> object:
    return settings_from_mapping({
        "scenario": "Server", "target_qps": 20.0, "preset": "dev", "min_duration_s": 1.0,
        "min_query_count": 10, "input_tokens": 50, "output_tokens": 4,
        "use_token_latencies": True, "ttft_latency_ms": 1000.0, "tpot_latency_ms": 1000.0,
        "max_issue_lag_ms": 1000.0, **more})


def test_a_server_run_of_sessions_reports_each_turn(tmp_path: Path) -> None:
    result = run_test(settings(turns=3, think_time_ms=20.0),
                      "llmsim:step_base=1ms,step_per_seq=100us,prefill_per_token=10us",
                      out_dir=tmp_path)
    doc = json.loads((tmp_path / "result.json").read_text())
    turns = doc["turns"]
    assert sorted(turns) == ["1", "2", "3"]
    sessions = turns["1"]["count"]
    assert sessions >= 10 and turns["2"]["count"] == turns["3"]["count"] == sessions
    assert doc["tokens"]["requests"] == 3 * sessions  # the drain waited for every turn
    for k in (1, 2, 3):  # never below the model's prefill of the grown prompt (50k + 4(k-1))
        grown = 50 * k + 4 * (k - 1)
        assert turns[str(k)]["ttft_ns"]["min"] >= (1.1 * MS + grown * 10 * US) * 0.999
        assert turns[str(k)]["tpot_ns"]["count"] == sessions
    assert "turn 3" in render_summary(result)
    # every later turn was scheduled exactly 20 ms after an answer's end, and sent no sooner
    rows = [line.split(",") for line in
            (tmp_path / "queries.csv").read_text().splitlines()[1:]]
    done = {int(r[3]) for r in rows}
    follow_ups = [r for r in rows if int(r[0]) >= FOLLOW_UP_IDS]
    assert len(follow_ups) == 2 * sessions
    for row in follow_ups:
        scheduled, sent = int(row[1]), int(row[2])
        assert scheduled - 20 * MS in done and sent >= scheduled


def test_a_sut_without_turns_is_refused() -> None:
    with pytest.raises(SutError, match="issue_turn"):
        run_test(settings(turns=2), "sim:service=const:1ms")


def test_load_processes_merge_their_turns(tmp_path: Path) -> None:
    result = run_test(settings(turns=2, think_time_ms=10.0, workers=2),
                      "llmsim:step_base=1ms,step_per_seq=100us,prefill_per_token=10us",
                      out_dir=tmp_path)
    ts = result.stats.token_stats
    assert ts is not None
    assert sorted(ts.turns) == ["1", "2"]
    assert ts.turns["1"].count == ts.turns["2"].count
    assert 2 * ts.turns["1"].count == ts.tokens.requests == result.stats.queries
    rows, _ = read_binary(tmp_path)  # the merged query log: every query once, ids apart
    follow_ups = rows["query_id"][rows["query_id"] >= FOLLOW_UP_IDS]
    assert len(follow_ups) and len(np.unique(rows["query_id"])) == len(rows)
