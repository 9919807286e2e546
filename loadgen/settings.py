"""Test settings: what the user asked for, validated, plus MLPerf defaults.

Layers, later wins: the scenario's MLPerf defaults, then the `dev` preset when
asked for, then the TOML file, then `--set key=value` overrides. Every problem
is gathered into one `SettingsError` that names each bad key.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.errors import SettingsError

__all__ = [
    "ARRIVALS",
    "PRESETS",
    "Scenario",
    "TestSettings",
    "field_docs",
    "load_settings",
    "parse_overrides",
    "settings_from_mapping",
]

ARRIVALS = ("poisson", "constant", "closed")
PRESETS = ("mlperf", "dev")
MODES = ("performance", "accuracy")


class Scenario(enum.StrEnum):
    """MLPerf's four scenarios, names kept."""

    SINGLE_STREAM = "SingleStream"
    MULTI_STREAM = "MultiStream"
    SERVER = "Server"
    OFFLINE = "Offline"


def _f(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True, slots=True)
class TestSettings:
    """One test definition. Units are in the names; 0 means 'no limit' where noted."""

    scenario: Scenario = _f(Scenario.SERVER, "SingleStream, MultiStream, Server or Offline")
    preset: str = _f("mlperf", "`mlperf` (compliant defaults) or `dev` (short, not compliant)")
    mode: str = _f("performance", "`performance`, or `accuracy` (every sample once, checked)")
    arrival: str = _f("poisson", "Server arrivals: `poisson`, `constant`, or `closed` loop")
    concurrency: int = _f(1, "queries kept in flight by a closed loop")
    target_qps: float = _f(100.0, "Server: offered rate; Offline: expected samples/s")
    target_latency_ms: float = _f(0.0, "latency SLO in ms; 0 = none (required for Server)")
    target_latency_percentile: float = _f(99.0, "percentile the SLO applies to, in (0, 100)")
    min_duration_s: float = _f(600.0, "minimum measured duration")
    max_duration_s: float = _f(0.0, "stop issuing after this long; 0 = no limit")
    min_query_count: int = _f(270336, "minimum measured queries")
    max_query_count: int = _f(0, "stop issuing after this many queries; 0 = no limit")
    samples_per_query: int = _f(1, "samples per query (MultiStream: 8; Offline: derived)")
    total_sample_count: int = _f(1024, "samples in the query sample library")
    performance_sample_count: int = _f(1024, "samples loaded for the performance run")
    qsl_rng_seed: int = _f(3066443479025735752, "seed choosing the loaded samples")
    sample_index_rng_seed: int = _f(10688027786191513374, "seed choosing each query's samples")
    schedule_rng_seed: int = _f(14962580496156340209, "seed of the arrival schedule")
    warmup_s: float = _f(0.0, "leading seconds issued but not measured")
    query_timeout_ms: float = _f(0.0, "a query unanswered this long fails; 0 = none")
    drain_timeout_s: float = _f(10.0, "after the last issue, wait this long for completions")
    max_issue_lag_ms: float = _f(2.0, "p99 issue lag above this means the harness fell behind")
    accuracy_target: float = _f(0.0, "accuracy mode: minimum accuracy in [0, 1]")

    @property
    def compliant(self) -> bool:
        """Whether the run follows MLPerf's minimums (the `dev` preset does not)."""
        return self.preset == "mlperf"

    @property
    def closed_loop(self) -> bool:
        """Whether each completion triggers the next issue."""
        return self.scenario in (Scenario.SINGLE_STREAM, Scenario.MULTI_STREAM) or (
            self.scenario is Scenario.SERVER and self.arrival == "closed"
        )

    @property
    def offline_sample_count(self) -> int:
        """MLPerf's Offline query size: 10% over expected rate times minimum duration."""
        return max(self.min_query_count, math.ceil(1.1 * self.target_qps * self.min_duration_s))

    def as_dict(self) -> dict[str, Any]:
        """Plain values, for result.json."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | {
            "scenario": str(self.scenario),
            "compliant": self.compliant,
        }


SCENARIO_DEFAULTS: dict[Scenario, dict[str, Any]] = {
    Scenario.SINGLE_STREAM: {"target_latency_percentile": 90.0, "min_query_count": 1024},
    Scenario.MULTI_STREAM: {"target_latency_percentile": 99.0, "min_query_count": 270336,
                            "samples_per_query": 8},
    Scenario.SERVER: {"target_latency_percentile": 99.0, "min_query_count": 270336},
    Scenario.OFFLINE: {"target_latency_percentile": 99.0, "min_query_count": 1},
}

DEV_PRESET: dict[str, Any] = {"min_duration_s": 5.0, "min_query_count": 100}

_FIELDS = {f.name: f for f in dataclasses.fields(TestSettings)}
_INT_KEYS = {n for n, f in _FIELDS.items() if f.type == "int"}
_FLOAT_KEYS = {n for n, f in _FIELDS.items() if f.type == "float"}


def field_docs() -> dict[str, str]:
    """Each setting's one-line description, for the CLI and README."""
    return {name: f.metadata["doc"] for name, f in _FIELDS.items()}


def _coerce(key: str, value: Any, problems: list[str]) -> Any:
    if key not in _FIELDS:
        problems.append(f"{key}: unknown key")
        return None
    if key == "scenario":
        try:
            return Scenario(value)
        except ValueError:
            names = ", ".join(s.value for s in Scenario)
            problems.append(f"scenario: {value!r} is not one of {names}")
            return None
    if key in _INT_KEYS:
        if isinstance(value, bool) or not isinstance(value, int):
            problems.append(f"{key}: expected an integer, got {value!r}")
            return None
        return value
    if key in _FLOAT_KEYS:
        if isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(f"{key}: expected a number, got {value!r}")
            return None
        if not math.isfinite(value):
            problems.append(f"{key}: must be finite, got {value!r}")
            return None
        return float(value)
    if not isinstance(value, str):
        problems.append(f"{key}: expected a string, got {value!r}")
        return None
    return value


def _check(s: TestSettings, problems: list[str]) -> None:
    for key in ("target_qps", "min_duration_s", "max_duration_s", "target_latency_ms", "warmup_s",
                "query_timeout_ms", "drain_timeout_s", "max_issue_lag_ms", "min_query_count",
                "max_query_count"):
        if getattr(s, key) < 0:
            problems.append(f"{key}: must not be negative, got {getattr(s, key)!r}")
    for key in ("samples_per_query", "total_sample_count", "performance_sample_count",
                "concurrency"):
        if getattr(s, key) < 1:
            problems.append(f"{key}: must be at least 1, got {getattr(s, key)!r}")
    if not 0 < s.target_latency_percentile < 100:
        problems.append(f"target_latency_percentile: must be in (0, 100), got "
                        f"{s.target_latency_percentile!r}")
    if not 0 <= s.accuracy_target <= 1:
        problems.append(f"accuracy_target: must be in [0, 1], got {s.accuracy_target!r}")
    for key, allowed in (("arrival", ARRIVALS), ("preset", PRESETS), ("mode", MODES)):
        if getattr(s, key) not in allowed:
            problems.append(f"{key}: {getattr(s, key)!r} is not one of {', '.join(allowed)}")
    if s.scenario is Scenario.SERVER and s.arrival != "closed" and s.target_qps <= 0:
        problems.append("target_qps: Server needs a positive rate")
    if s.scenario is Scenario.SERVER and s.target_latency_ms <= 0:
        problems.append("target_latency_ms: Server needs a latency SLO above 0")
    if s.performance_sample_count > s.total_sample_count:
        problems.append("performance_sample_count: larger than total_sample_count")
    if s.max_duration_s and s.max_duration_s < s.min_duration_s:
        problems.append("max_duration_s: shorter than min_duration_s")
    if s.max_query_count and s.max_query_count < s.min_query_count:
        problems.append("max_query_count: smaller than min_query_count")


def settings_from_mapping(values: dict[str, Any]) -> TestSettings:
    """Build validated settings from flat key/values over scenario and preset defaults."""
    problems: list[str] = []
    coerced = {k: _coerce(k, v, problems) for k, v in values.items()}
    scenario = coerced.get("scenario") or Scenario.SERVER
    layered: dict[str, Any] = dict(SCENARIO_DEFAULTS[scenario])
    if coerced.get("preset") == "dev":
        layered |= DEV_PRESET
    layered |= {k: v for k, v in coerced.items() if v is not None}
    settings = TestSettings(**layered)
    _check(settings, problems)
    if problems:
        raise SettingsError(problems)
    return settings


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """Turn `key=value` strings into typed values (TOML literals, else plain strings)."""
    out: dict[str, Any] = {}
    problems: list[str] = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            problems.append(f"--set {pair!r}: expected key=value")
            continue
        try:
            out[key] = tomllib.loads(f"v = {raw.strip()}")["v"]
        except tomllib.TOMLDecodeError:
            out[key] = raw.strip()
    if problems:
        raise SettingsError(problems)
    return out


def load_settings(path: str | Path | None, overrides: list[str] | None = None) -> TestSettings:
    """Read a TOML test definition, apply `--set` overrides, validate."""
    values: dict[str, Any] = {}
    if path is not None:
        try:
            values = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise SettingsError([f"{path}: no such file"]) from None
        except tomllib.TOMLDecodeError as exc:
            raise SettingsError([f"{path}: not valid TOML: {exc}"]) from None
    return settings_from_mapping(values | parse_overrides(overrides or []))
