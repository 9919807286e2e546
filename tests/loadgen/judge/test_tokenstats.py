"""A token run's figures as typed records: read from the result.json main's code wrote
(tests/data/records) and written again, key for key, in the same order; readers use
attributes."""

import json
from pathlib import Path

import pytest

from loadgen.judge.summaries import LatencySummary
from loadgen.judge.tokenstats import (
    CacheFigures,
    CountCheck,
    RateSummary,
    TokenCounts,
    TokenStats,
    TurnFigures,
)

DATA = Path(__file__).parents[2] / "data" / "records"
TOKEN_KEYS = ("ttft_ns", "ttfo_ns", "e2e_ns", "tpot_ns", "itl_ns", "chunk_gap_ns",
              "normalized_latency_ns", "longest_stall_ns", "tokens", "goodput",
              "token_early_stopping", "token_histograms", "turns")


def _doc() -> dict:
    return json.loads((DATA / "token_workers_result.json").read_text())


def test_the_token_keys_round_trip_byte_for_byte():
    doc = _doc()
    ts = TokenStats.from_dict(doc)
    assert ts is not None
    written = ts.as_dict()
    assert written["tokens"].pop("tokenizer") is None  # merged after the fixture: None for it
    assert json.dumps(written) == json.dumps({k: doc[k] for k in TOKEN_KEYS})


def test_the_blocks_are_typed_records_read_by_attribute():
    doc = _doc()
    ts = TokenStats.from_dict(doc)
    assert ts is not None
    t = ts.tokens
    assert isinstance(t.input, LatencySummary) and t.input.count == doc["tokens"]["requests"]
    assert isinstance(t.output_per_s_per_request, RateSummary)
    assert t.output_per_s_per_request.p50 == doc["tokens"]["output_per_s_per_request"]["p50"]
    assert isinstance(t.discrepancy, CountCheck) and isinstance(t.cache, CacheFigures)
    assert t.cache.hit_rate.achieved is None and t.reasoning is not None
    assert sorted(ts.turns) == ["1", "2"] and isinstance(ts.turns["1"], TurnFigures)
    assert ts.turns["1"].ttft_ns.p99 == doc["turns"]["1"]["ttft_ns"]["p99"]
    ttft = ts.latency("ttft_ns")
    assert ttft.summary.quantile(0.99) == doc["ttft_ns"]["p99"]
    assert ttft.from_send is not None and ttft.from_send.p50 == doc["ttft_ns"]["from_send"]["p50"]
    with pytest.raises(ValueError, match="no summary figure"):
        ttft.summary.quantile(0.42)


def test_counts_written_before_cache_and_reasoning_read_as_none_reported():
    doc = _doc()["tokens"]
    del doc["cache"], doc["reasoning"]
    old = TokenCounts.from_dict(doc)
    assert old.reasoning is None and old.cache.requests_reporting == 0
    assert old.as_dict()["reasoning"] == {}
