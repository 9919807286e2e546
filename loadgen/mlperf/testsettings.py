"""`TestSettings`: what a LoadGen harness asks for, with LoadGen's field names, units and defaults.

Units are LoadGen's: durations in ms, latencies in ns, percentiles as fractions
(0.99). `FromConfig` reads a conf file into the fields the way LoadGen does
(see `conf`); the settings our engine runs are derived from these in `derive`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from loadgen.mlperf.conf import applied_fields, read_conf
from loadgen.mlperf.types import TestMode, TestScenario

__all__ = ["TestSettings"]


@dataclass(slots=True)
class TestSettings:
    """LoadGen's `mlperf::TestSettings`, field for field (defaults of the 6.x binding)."""

    __test__ = False  # not a pytest test class

    scenario: TestScenario = TestScenario.SingleStream
    mode: TestMode = TestMode.PerformanceOnly
    single_stream_expected_latency_ns: float = 1_000_000.0
    single_stream_target_latency_percentile: float = 0.9
    multi_stream_expected_latency_ns: float = 8_000_000.0
    multi_stream_target_latency_percentile: float = 0.99
    multi_stream_samples_per_query: int = 8
    server_target_qps: float = 1.0
    server_target_latency_ns: int = 100_000_000
    server_target_latency_percentile: float = 0.99
    server_coalesce_queries: bool = False
    server_find_peak_qps_decimals_of_precision: int = 1
    server_find_peak_qps_boundary_step_size: float = 1.0
    server_max_async_queries: int = 0
    server_num_issue_query_threads: int = 0
    offline_expected_qps: float = 1.0
    sample_concatenate_permutation: bool = False
    min_duration_ms: int = 10_000
    max_duration_ms: int = 0
    min_query_count: int = 100
    max_query_count: int = 0
    qsl_rng_seed: int = 0
    sample_index_rng_seed: int = 0
    schedule_rng_seed: int = 0
    accuracy_log_rng_seed: int = 0
    accuracy_log_probability: float = 0.0
    accuracy_log_sampling_target: int = 0
    print_timestamps: bool = False
    performance_issue_unique: bool = False
    performance_issue_same: bool = False
    performance_issue_same_index: int = 0
    performance_sample_count_override: int = 0
    accuracy_sample_count_override: int = 0
    test05: bool = False
    test05_qsl_rng_seed: int = 0
    test05_sample_index_rng_seed: int = 0
    test05_schedule_rng_seed: int = 0
    use_token_latencies: bool = False
    ttft_latency: int = 100_000_000
    tpot_latency: int = 100_000_000
    infer_token_latencies: bool = False
    token_latency_scaling_factor: int = 0

    def FromConfig(self, path: str, model: str, scenario: str,
                   conf_type: int = 1) -> int:
        """Apply a conf file's keys for (model, scenario); 0 on success, as LoadGen returns.

        `conf_type` 1 reads a user.conf; 0 reads `path` as an mlperf.conf, whose
        benchmark-rule keys (seeds, accuracy-log probability, TEST05) it may also
        set. LoadGen embeds MLCommons' mlperf.conf and applies it before the first
        user.conf; here no rules file is built in: read one with conf_type 0 first.
        """
        values = read_conf(path)
        for name, value in applied_fields(values, model, scenario, rules=conf_type == 0,
                                          current=self.as_dict()):
            setattr(self, name, TestMode(value) if name == "mode" else value)
        return 0

    def as_dict(self) -> dict[str, Any]:
        """Every field by name (enums as themselves)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The fields, in declaration order."""
        return tuple(f.name for f in fields(cls))
