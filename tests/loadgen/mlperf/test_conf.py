"""mlperf.conf / user.conf: read as LoadGen reads them, field by field against the real package."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from loadgen.errors import SettingsError
from loadgen.mlperf import TestMode, TestSettings
from loadgen.mlperf.conf import lookup, parse_conf
from loadgen.mlperf.layer import conf_layer

_spec = importlib.util.find_spec("mlperf_loadgen")
REAL = _spec is not None and (_spec.origin or "").endswith(".so")

USER_CONF = """\
# wildcards, per-model keys, LoadGen's units (ms, percent)
*.*.min_duration = 1500
*.*.max_duration = 90000
*.*.min_query_count = 64
*.*.mode = 2
*.SingleStream.target_latency = 5
mymodel.SingleStream.target_latency = 2.5
*.SingleStream.target_latency_percentile = 95
*.MultiStream.target_latency = 40
*.MultiStream.samples_per_query = 4
mymodel.MultiStream.target_latency_percentile = 99.9
*.Server.target_qps = 123.5
*.Server.target_latency = 25
mymodel.Server.target_latency = 40.7
*.Server.coalesce_queries = 1
*.Server.max_async_queries = 3
*.Offline.target_qps = 2000
mymodel.*.performance_sample_count_override = 100
mymodel.*.min_query_count = 0x20
othermodel.*.min_query_count = 999
*.*.use_token_latencies = 1
mymodel.Server.ttft_latency = 500
*.Server.tpot_latency = 50
*.*.accuracy_log_rng_seed = 7
*.*.qsl_rng_seed = 42
"""
RULES_ONLY = {"qsl_rng_seed", "sample_index_rng_seed", "schedule_rng_seed",
              "accuracy_log_probability", "test05", "test05_qsl_rng_seed",
              "test05_sample_index_rng_seed", "test05_schedule_rng_seed"}
"""Only an mlperf.conf sets these; LoadGen's built-in one sets the seeds, ours has none."""


@pytest.fixture
def user_conf(tmp_path: Path) -> Path:
    path = tmp_path / "user.conf"
    path.write_text(USER_CONF)
    return path


def test_lookup_order_exact_then_model_wildcard_then_scenario_wildcard():
    values = {"*.*.k": "1", "m.*.k": "2", "*.S.k": "3", "m.S.k": "4"}
    assert lookup(values, "m", "S", "k") == "4"
    del values["m.S.k"]
    assert lookup(values, "m", "S", "k") == "3"
    del values["*.S.k"]
    assert lookup(values, "m", "S", "k") == "2"
    assert lookup(values, "x", "T", "k") == "1"
    assert lookup({}, "m", "S", "k") is None


def test_units_and_integer_reading(user_conf: Path):
    s = TestSettings()
    assert s.FromConfig(str(user_conf), "mymodel", "Server") == 0
    assert s.min_duration_ms == 1500 and s.min_query_count == 32  # 0x20, the per-model key
    assert s.server_target_latency_ns == 40_000_000  # "40.7" read as an integer, times 1e6
    assert s.single_stream_expected_latency_ns == 2.5e6
    assert s.single_stream_target_latency_percentile == pytest.approx(0.95)
    assert s.mode is TestMode.PerformanceOnly
    assert s.ttft_latency == 500_000_000 and s.tpot_latency == 50_000_000
    assert s.qsl_rng_seed == 0  # a rule: not from a user.conf
    s.FromConfig(str(user_conf), "mymodel", "Server", 0)
    assert s.qsl_rng_seed == 42


def test_malformed_lines_are_errors_naming_the_line():
    with pytest.raises(SettingsError, match=r"conf:2: expected 'key = value'"):
        parse_conf("a.b.c = 1\na.b.d 2\n", "conf")
    with pytest.raises(SettingsError, match=r"conf:1: a.b.c: value 'fast' is not a number"):
        parse_conf("a.b.c = fast\n", "conf")
    assert parse_conf("# only a comment\n\n a.b.c = 3 # trailing\n") == {"a.b.c": "3"}


def test_missing_file_is_an_error(tmp_path: Path):
    with pytest.raises(SettingsError, match="no such conf file"):
        TestSettings().FromConfig(str(tmp_path / "none.conf"), "m", "Server")


def test_the_conf_as_a_layer_of_our_settings(user_conf: Path):
    values, unused = conf_layer("mymodel", "Server", user_conf=user_conf)
    assert values == {"mode": "performance", "use_token_latencies": True,
                      "ttft_latency_ms": 500.0, "tpot_latency_ms": 50.0,
                      "target_latency_ms": 40.0, "performance_sample_count": 100,
                      "min_duration_s": 1.5, "max_duration_s": 90.0, "min_query_count": 32,
                      "target_qps": 123.5}
    assert "server_coalesce_queries" in unused and "server_max_async_queries" in unused
    values, _ = conf_layer("othermodel", "MultiStream", user_conf=user_conf)
    assert values["samples_per_query"] == 4 and values["min_query_count"] == 999
    assert "target_latency_percentile" not in values  # not set for othermodel: left as is
    assert "target_qps" not in values


@pytest.mark.skipif(not REAL, reason="mlcommons-loadgen is not installed")
@pytest.mark.parametrize("model", ["mymodel", "othermodel"])
@pytest.mark.parametrize("scenario", ["SingleStream", "MultiStream", "Server", "Offline"])
def test_same_fields_as_mlcommons_loadgen(user_conf: Path, model: str, scenario: str):
    import mlperf_loadgen

    real = mlperf_loadgen.TestSettings()
    assert real.FromConfig(str(user_conf), model, scenario) == 0
    ours = TestSettings()
    ours.FromConfig(str(user_conf), model, scenario)
    names = TestSettings.field_names()
    assert set(names) == {n for n in dir(real) if not n.startswith("_") and n != "FromConfig"}
    for name in names:
        if name in RULES_ONLY:
            continue
        mine, theirs = getattr(ours, name), getattr(real, name)
        if name in ("scenario", "mode"):
            assert mine.name == theirs.name, name
        else:
            assert mine == pytest.approx(theirs), name
