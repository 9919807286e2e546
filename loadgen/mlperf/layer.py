"""mlperf.conf / user.conf as a settings layer of `loadgen run` (`--mlperf-conf`, `--user-conf`).

The files are read as LoadGen reads them (`conf`) into LoadGen's fields, and
each field they set for the run's scenario becomes one of our keys, in our
units: ms durations -> `*_s`, ns latencies -> `*_ms`, fractions -> percent.
LoadGen keys without a counterpart here (expected latencies of SingleStream and
MultiStream, coalescing, print_timestamps, the accuracy-log and TEST05 keys)
are reported, not applied. Layers, later wins: TOML, mlperf.conf, user.conf, --set.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadgen.errors import SettingsError
from loadgen.mlperf.conf import applied_fields, read_conf
from loadgen.mlperf.testsettings import TestSettings

__all__ = ["OURS", "conf_layer", "conf_overrides"]

_MODES = {1: "accuracy", 2: "performance"}

OURS: dict[str, tuple[str | None, str, Callable[[Any], Any]]] = {
    # LoadGen field: (the scenario it applies to, or None for any; our key; conversion)
    "min_duration_ms": (None, "min_duration_s", lambda v: v / 1e3),
    "max_duration_ms": (None, "max_duration_s", lambda v: v / 1e3),
    "min_query_count": (None, "min_query_count", int),
    "max_query_count": (None, "max_query_count", int),
    "performance_sample_count_override": (None, "performance_sample_count", int),
    "qsl_rng_seed": (None, "qsl_rng_seed", int),
    "sample_index_rng_seed": (None, "sample_index_rng_seed", int),
    "schedule_rng_seed": (None, "schedule_rng_seed", int),
    "single_stream_target_latency_percentile": ("SingleStream", "target_latency_percentile",
                                                lambda v: v * 100),
    "multi_stream_target_latency_percentile": ("MultiStream", "target_latency_percentile",
                                               lambda v: v * 100),
    "multi_stream_samples_per_query": ("MultiStream", "samples_per_query", int),
    "server_target_qps": ("Server", "target_qps", float),
    "server_target_latency_ns": ("Server", "target_latency_ms", lambda v: v / 1e6),
    "server_target_latency_percentile": ("Server", "target_latency_percentile",
                                         lambda v: v * 100),
    "offline_expected_qps": ("Offline", "target_qps", float),
    "use_token_latencies": (None, "use_token_latencies", bool),
    "ttft_latency": (None, "ttft_latency_ms", lambda v: v / 1e6),
    "tpot_latency": (None, "tpot_latency_ms", lambda v: v / 1e6),
}


def conf_layer(model: str, scenario: str, mlperf_conf: str | Path | None = None,
               user_conf: str | Path | None = None) -> tuple[dict[str, Any], list[str]]:
    """Our settings keys the conf files set for (model, scenario), and the keys left unused."""
    values: dict[str, Any] = {}
    unused: list[str] = []
    current = TestSettings().as_dict()
    for path, rules in ((mlperf_conf, True), (user_conf, False)):
        if path is None:
            continue
        for name, value in applied_fields(read_conf(path), model, scenario, rules=rules,
                                          current=current):
            current[name] = value
            if name == "mode":
                if value not in _MODES:
                    raise SettingsError([(f"{path}: mode {value}: loadgen run does one "
                                         "accuracy (1) or performance (2) run")])
                values["mode"] = _MODES[value]
            elif name in OURS and OURS[name][0] in (None, scenario):
                if name != "performance_sample_count_override" or value:
                    values[OURS[name][1]] = OURS[name][2](value)
            elif name not in OURS:
                unused.append(name)
    return values, sorted(set(unused))


def conf_overrides(model: str, scenario: str, mlperf_conf: str | Path | None,
                   user_conf: str | Path | None) -> list[str]:
    """`conf_layer` as `key=value` overrides (ahead of --set), warning of unused keys."""
    values, unused = conf_layer(model, scenario, mlperf_conf, user_conf)
    if unused:
        print(f"loadgen: warning: conf keys with no loadgen setting, not applied: "
              f"{', '.join(unused)}", file=sys.stderr)
    return [f"{key}={json.dumps(value)}" for key, value in values.items()]
