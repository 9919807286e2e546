"""A token run end to end on the real engine: llmsim through run_test, result.json written and
read back, and several load processes merging their token tallies."""

import json
from pathlib import Path

import pytest

from loadgen.api import run_test
from loadgen.plan.settings import settings_from_mapping
from loadgen.report.result import read_result

MS = 1_000_000
SERVER = {"scenario": "Server", "preset": "dev", "min_duration_s": 1.0, "target_qps": 40.0,
          "min_query_count": 20, "use_token_latencies": True, "ttft_latency_ms": 50.0,
          "tpot_latency_ms": 10.0, "input_tokens": {"dist": "uniform", "min": 50, "max": 150},
          "output_tokens": 8, "fixed_output": True,
          "target_latency_percentile": 90.0,  # early stopping passes from 44 requests
          "max_issue_lag_ms": 50.0}  # a shared, loaded test machine
SPEC = "llmsim:step_base=2ms,step_per_seq=100us,prefill_per_token=10us,max_seqs=8"


@pytest.mark.serial  # VALID needs TTFT under 50 ms: failed beside another worker (-n 2)
def test_a_light_server_run_is_valid_and_its_figures_follow_the_model(tmp_path: Path) -> None:
    result = run_test(settings_from_mapping(SERVER), SPEC, out_dir=tmp_path)
    doc = json.loads((tmp_path / "result.json").read_text())
    assert result.valid, doc["reasons"]
    for key in ("ttft_ns", "ttfo_ns", "tpot_ns", "itl_ns", "e2e_ns", "tokens", "goodput"):
        assert key in doc
    # TPOT at least one step of a batch of one; TTFT at least a lone prefill of 50 tokens
    assert doc["tpot_ns"]["min"] >= 2.1 * MS * 0.999
    assert doc["ttft_ns"]["from_send"]["min"] >= (2.1 + 0.5) * MS * 0.999
    assert doc["ttft_ns"]["p50"] >= doc["ttft_ns"]["from_send"]["p50"]
    assert doc["tokens"]["output_total"] == 8 * doc["tokens"]["requests"]
    assert doc["itl_ns"]["count"] == 7 * doc["tokens"]["requests"]
    assert doc["goodput"]["attainment"] == 1.0
    assert doc["plan"]["tokens"]["targets_ms"] == {"ttft": 50.0, "tpot": 10.0}
    back = read_result(tmp_path)
    assert back.stats.token_stats == result.stats.token_stats


def test_an_overloaded_server_run_fails_on_ttft(tmp_path: Path) -> None:
    over = SERVER | {"target_qps": 400.0, "output_tokens": 32}  # far above capacity
    result = run_test(settings_from_mapping(over), SPEC)
    assert not result.valid
    assert "ttft_latency" in [str(c) for c in result.verdict.codes]


@pytest.mark.parametrize("workers", [2])
def test_load_processes_merge_their_token_figures(tmp_path: Path, workers: int) -> None:
    settings = settings_from_mapping(SERVER | {"workers": workers})
    result = run_test(settings, SPEC, out_dir=tmp_path)
    ts = result.stats.token_stats
    assert ts is not None
    assert ts.tokens.requests == result.stats.queries
    assert ts.latencies["ttft_ns"].summary.count == result.stats.queries


def test_single_stream_and_offline_runs_on_llmsim() -> None:
    common = {"preset": "dev", "min_duration_s": 0.5, "input_tokens": 20, "output_tokens": 4,
              "total_sample_count": 64, "performance_sample_count": 64}
    single = run_test(settings_from_mapping(common | {"scenario": "SingleStream",
                                                      "min_query_count": 20}), SPEC)
    assert single.valid, [r.text for r in single.verdict.reasons]
    ts = single.stats.token_stats
    assert ts is not None and ts.tokens.requests == single.stats.queries
    # one request at a time: TPOT is exactly one step of a batch of one (2.1 ms)
    assert ts.latencies["tpot_ns"].summary.max == pytest.approx(2.1 * MS, rel=2e-3)
    # Offline: 1.1 x 700 x 0.5 s = 385 samples at about 625 a second (capacity_qps)
    offline = run_test(settings_from_mapping(common | {"scenario": "Offline",
                                                       "target_qps": 700.0}), SPEC)
    assert offline.valid, [r.text for r in offline.verdict.reasons]
    assert offline.headline.name == "tokens_per_s"
    ots = offline.stats.token_stats
    assert ots is not None and ots.tokens.output_total == 4 * offline.stats.samples
