"""mlperf.conf / user.conf: LoadGen's `model.scenario.key = value` files, read as LoadGen reads them.

A line holds one key and one number; `#` starts a comment. A key is looked up
for a (model, scenario) in LoadGen's order: `model.scenario.key`, then
`*.scenario.key`, then `model.*.key`, then `*.*.key`. Values are in LoadGen's
units: durations and latencies in ms (stored in ns where the field is),
percentiles in percent (stored as fractions). Integer fields read the leading
integer of the value (`strtoull`), as LoadGen does. The seeds, the accuracy-log
probability and the TEST05 keys are rules of the benchmark: only an mlperf.conf
(`rules=True`) may set them, as only LoadGen's built-in mlperf.conf does.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.errors import SettingsError

__all__ = ["RULES", "ConfRule", "applied_fields", "lookup", "parse_conf", "read_conf"]


@dataclass(frozen=True, slots=True)
class ConfRule:
    """One conf key and the LoadGen `TestSettings` field it sets.

    `scenario` pins the lookup to one scenario (LoadGen reads `target_latency`
    of Server for `server_target_latency_ns` whatever the test's scenario);
    `kind` is int, float, `nonzero` or `one` (a flag true when the value is not 0 /
    is 1); `needs` names a flag field that must be true for the key to be read.
    """

    key: str
    field: str
    kind: str = "int"
    scale: float = 1.0
    scenario: str | None = None
    rules_only: bool = False
    needs: str | None = None


RULES: tuple[ConfRule, ...] = (
    ConfRule("qsl_rng_seed", "qsl_rng_seed", rules_only=True),
    ConfRule("sample_index_rng_seed", "sample_index_rng_seed", rules_only=True),
    ConfRule("schedule_rng_seed", "schedule_rng_seed", rules_only=True),
    ConfRule("accuracy_log_probability", "accuracy_log_probability", "float", 0.01,
             rules_only=True),
    ConfRule("test05", "test05", "one", rules_only=True),
    ConfRule("test05_qsl_rng_seed", "test05_qsl_rng_seed", rules_only=True),
    ConfRule("test05_sample_index_rng_seed", "test05_sample_index_rng_seed", rules_only=True),
    ConfRule("test05_schedule_rng_seed", "test05_schedule_rng_seed", rules_only=True),
    ConfRule("use_token_latencies", "use_token_latencies", "one"),
    ConfRule("ttft_latency", "ttft_latency", "int", 1e6, "Server", needs="use_token_latencies"),
    ConfRule("tpot_latency", "tpot_latency", "int", 1e6, "Server", needs="use_token_latencies"),
    ConfRule("infer_token_latencies", "infer_token_latencies", "one"),
    ConfRule("token_latency_scaling_factor", "token_latency_scaling_factor",
             needs="infer_token_latencies"),
    ConfRule("target_latency_percentile", "single_stream_target_latency_percentile", "float",
             0.01, "SingleStream"),
    ConfRule("target_latency_percentile", "multi_stream_target_latency_percentile", "float",
             0.01, "MultiStream"),
    ConfRule("samples_per_query", "multi_stream_samples_per_query", scenario="MultiStream"),
    ConfRule("target_latency_percentile", "server_target_latency_percentile", "float", 0.01,
             "Server"),
    ConfRule("target_latency", "server_target_latency_ns", "int", 1e6, "Server"),
    ConfRule("performance_issue_unique", "performance_issue_unique", "nonzero"),
    ConfRule("performance_issue_same", "performance_issue_same", "nonzero"),
    ConfRule("performance_issue_same_index", "performance_issue_same_index"),
    ConfRule("sample_concatenate_permutation", "sample_concatenate_permutation", "one"),
    ConfRule("coalesce_queries", "server_coalesce_queries", "nonzero", scenario="Server"),
    ConfRule("max_async_queries", "server_max_async_queries", scenario="Server"),
    ConfRule("min_duration", "min_duration_ms"),
    ConfRule("max_duration", "max_duration_ms"),
    ConfRule("min_query_count", "min_query_count"),
    ConfRule("max_query_count", "max_query_count"),
    ConfRule("performance_sample_count_override", "performance_sample_count_override"),
    ConfRule("accuracy_sample_count_override", "accuracy_sample_count_override"),
    ConfRule("target_latency", "single_stream_expected_latency_ns", "float", 1e6, "SingleStream"),
    ConfRule("target_latency", "multi_stream_expected_latency_ns", "float", 1e6, "MultiStream"),
    ConfRule("target_qps", "server_target_qps", "float", scenario="Server"),
    ConfRule("target_qps", "offline_expected_qps", "float", scenario="Offline"),
    ConfRule("print_timestamps", "print_timestamps", "nonzero"),
    ConfRule("accuracy_log_rng_seed", "accuracy_log_rng_seed"),
    ConfRule("accuracy_log_sampling_target", "accuracy_log_sampling_target"),
)


def _is_number(text: str) -> bool:
    """Whether C's strtoul or strtod reads all of `text`, as LoadGen requires of a value."""
    try:
        int(text, 0)
    except ValueError:
        try:
            float(text)
        except ValueError:
            return False
    return True


def _leading_int(text: str) -> int:
    """What C's strtoull(text, 0) reads: an integer in base 10, 16 (0x) or 8 (0), or its
    leading integer digits ("0.5" -> 0)."""
    try:
        return int(text, 0)
    except ValueError:
        pass
    if re.fullmatch(r"0[0-7]+", text):
        return int(text, 8)
    try:
        return math.trunc(float(text))
    except (ValueError, OverflowError):
        return 0


def parse_conf(text: str, name: str = "<conf>") -> dict[str, str]:
    """The key -> value text of a conf file; a malformed line is an error naming it."""
    values: dict[str, str] = {}
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split()
        comment = next((i for i, w in enumerate(words) if w.startswith("#")), len(words))
        words = words[:comment]
        if not words:
            continue
        if len(words) != 3 or words[1] != "=":
            problems.append(f"{name}:{number}: expected 'key = value', got {line.strip()!r}")
        elif not _is_number(words[2]):
            problems.append(f"{name}:{number}: {words[0]}: value {words[2]!r} is not a number")
        else:
            values[words[0]] = words[2]
    if problems:
        raise SettingsError(problems)
    return values


def read_conf(path: str | Path) -> dict[str, str]:
    """`parse_conf` of a file; a missing file is an error naming it."""
    try:
        return parse_conf(Path(path).read_text(), str(path))
    except FileNotFoundError:
        raise SettingsError([f"{path}: no such conf file"]) from None


def lookup(values: dict[str, str], model: str, scenario: str, key: str) -> str | None:
    """LoadGen's lookup order: exact, model wildcard, scenario wildcard, both."""
    for candidate in (f"{model}.{scenario}.{key}", f"*.{scenario}.{key}",
                      f"{model}.*.{key}", f"*.*.{key}"):
        if candidate in values:
            return values[candidate]
    return None


def _convert(rule: ConfRule, text: str) -> Any:
    if rule.kind == "float":
        return float(text) * rule.scale
    number = _leading_int(text) * int(rule.scale)
    if rule.kind == "nonzero":
        return number != 0
    if rule.kind == "one":
        return number == 1
    return number


def applied_fields(values: dict[str, str], model: str, scenario: str, *, rules: bool,
                   current: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(field, value) for each LoadGen `TestSettings` field the conf sets, in LoadGen's order.

    `current` holds the fields' values so far (a `needs` flag is read there, after
    earlier keys of the same file took effect); `mode` comes first.
    """
    seen = dict(current)
    mode = lookup(values, model, scenario, "mode")
    if mode is not None:
        number = _leading_int(mode)
        if number not in (0, 1, 2, 3):
            raise SettingsError([(f"mode: {mode!r} is not 0 (SubmissionRun), 1 (AccuracyOnly), "
                                 "2 (PerformanceOnly) or 3 (FindPeakPerformance)")])
        yield "mode", number
    for rule in RULES:
        if rule.rules_only and not rules:
            continue
        if rule.needs is not None and not seen.get(rule.needs):
            continue
        text = lookup(values, model, rule.scenario or scenario, rule.key)
        if text is None:
            continue
        seen[rule.field] = value = _convert(rule, text)
        yield rule.field, value
