"""Test settings: what the user asked for, validated, plus MLPerf defaults.

Layers, later wins: the scenario's MLPerf defaults, then the `dev` preset when
asked for, then the TOML file, then `--set key=value` overrides. Every problem
is gathered into one `SettingsError` that names each bad key.
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.errors import SettingsError, suggest
from loadgen.plan.cpus import parse_cpus
from loadgen.plan.datasets.rows import DATASET_FORMATS
from loadgen.plan.jobs import check_jobs
from loadgen.plan.lengths import LengthDist, parse_length
from loadgen.plan.llmpresets import LLM_PRESETS, llm_preset
from loadgen.plan.prefixcache import check_prefix_cache
from loadgen.plan.tokenizers.load import is_file_tokenizer
from loadgen.plan.traces.named import TRACE_FORMATS
from loadgen.plan.turns import check_turns, parse_think_time, think_time_dict

__all__ = [
    "ARRIVALS",
    "DEV_PRESET",
    "PRESETS",
    "SCENARIO_DEFAULTS",
    "IssueMode",
    "Scenario",
    "TestSettings",
    "dev_token_queries",
    "issue_mode",
    "load_settings",
    "parse_overrides",
    "settings_from_mapping",
    "settings_from_record",
]

ARRIVALS = ("poisson", "constant", "gamma", "burst", "steps", "trace", "closed")
MAX_STEPS = 1000
PRESETS = ("mlperf", "dev")
MODES = ("performance", "accuracy")
ENERGY = ("auto", "off")
MAX_ENERGY_HZ = 1000.0


class Scenario(enum.StrEnum):
    """MLPerf's four scenarios, names kept."""

    SINGLE_STREAM = "SingleStream"
    MULTI_STREAM = "MultiStream"
    SERVER = "Server"
    OFFLINE = "Offline"


class IssueMode(enum.StrEnum):
    """How queries go out; `issue_mode` decides it, once, for the whole tool."""

    OPEN = "open"  # each query at its precomputed time, whatever is in flight (Server)
    CLOSED = "closed"  # the next query when one completes (SingleStream, MultiStream, closed)
    OFFLINE = "offline"  # every sample in one query at the start
    ACCURACY = "accuracy"  # every library sample once, closed loop


def _f(default: Any, doc: str) -> Any:
    return field(default=default, metadata={"doc": doc})


@dataclass(frozen=True, slots=True)
class TestSettings:
    """One test definition. Units are in the names; 0 means 'no limit' where noted."""

    scenario: Scenario = _f(  # noqa: RUF009 - _f makes a field(), not a shared default
        Scenario.SERVER, "SingleStream, MultiStream, Server or Offline")
    preset: str = _f("mlperf", "`mlperf` (compliant defaults) or `dev` (short, not compliant)")
    mode: str = _f("performance", "`performance`, or `accuracy` (every sample once, checked)")
    arrival: str = _f("poisson", "Server arrivals: `poisson`, `constant`, `gamma`, `burst`, "
                      "`steps`, `trace`, or `closed` loop")
    burstiness: float = _f(1.0, "gamma shape k: inter-arrival CV = 1/sqrt(k); 1 = Poisson, "
                           "below 1 burstier")
    burst_qps_factor: float = _f(3.0, "burst: the rate inside a burst, times target_qps")
    burst_start_s: float = _f(0.0, "burst: when the (first) burst begins, from the run's start")
    burst_duration_s: float = _f(0.0, "burst: how long each burst lasts (required)")
    burst_period_s: float = _f(0.0, "burst: bursts repeat this often; 0 = a single burst")
    steps: tuple[tuple[float, float], ...] = _f(
        (), "steps: [[start_s, qps], ...] from the run's start, the first at 0")
    ramp: bool = _f(False, "steps: the rate moves linearly from one step to the next")
    trace_file: str = _f("", "trace: CSV (column `timestamp` or `offset_s`) or JSON lines")
    time_scale: float = _f(1.0, "trace: multiply its offsets (0.5 = replay twice as fast)")
    trace_format: str = _f("auto", "trace_file's format: auto (timestamp/offset_s CSV or "
                           "JSONL), mooncake, azure, burstgpt")
    trace_block_tokens: int = _f(512, "mooncake: tokens per hash_ids block")
    schedule_file: str = _f("", "replay a run's schedule.bin exactly instead of generating one")
    window_s: float = _f(1.0, "timeline window; widened so a run has at most 200")
    workers: int = _f(1, "load processes, each issuing a share of the schedule (open loop)")
    worker_cpus: str = _f("", "pin the driver to the first of these cores (`0-3,8`) and each "
                          "load process to one of the rest, in turn; '' = no pinning")
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
    equal_issue: bool = _f(False, "draw samples as successive permutations of the loaded set, "
                           "so each is issued equally often (MLPerf's equal issue)")
    # token workloads and MLPerf token mode (#18)
    mlperf_model: str = _f("", "MLPerf LLM target (e.g. llama2-70b, llama2-70b-interactive): "
                           "sets token mode and its TTFT/TPOT bounds")
    use_token_latencies: bool = _f(False, "judge p99 TTFT and TPOT (Server: both must hold) "
                                   "instead of query latency")
    ttft_latency_ms: float = _f(0.0, "token mode: p99 time-to-first-token bound")
    tpot_latency_ms: float = _f(0.0, "token mode: p99 time-per-output-token bound")
    input_tokens: LengthDist | None = _f(  # noqa: RUF009 - _f makes a field()
        None, "prompt length: a number or {dist = ..., ...}")
    output_tokens: LengthDist | None = _f(  # noqa: RUF009 - _f makes a field()
        None, "max_tokens asked: a number or {dist = ...}; default 128")
    fixed_output: bool = _f(False, "ask for exactly max_tokens (ignore_eos / min_tokens)")
    dataset: str = _f("", "JSON lines of prompts ({\"prompt\": ..., \"output_tokens\": n})")
    dataset_format: str = _f("jsonl", "dataset's format: jsonl (prompt/messages), sharegpt, "
                             "lines (a line pool: prefix_tokens shared, input_tokens drawn)")
    dataset_min_input: int = _f(0, "dataset: drop rows with fewer input tokens")
    dataset_max_input: int = _f(0, "dataset: drop rows with more input tokens; 0 = no bound")
    dataset_min_output: int = _f(0, "dataset: drop rows with fewer output tokens")
    dataset_max_output: int = _f(0, "dataset: drop rows with more output tokens; 0 = no bound")
    dataset_samples: int = _f(0, "dataset: draw this many rows (seeded); 0 = every row in order")
    dataset_replacement: bool = _f(False, "dataset_samples drawn with replacement")
    prefix_tokens: int = _f(0, "shared-prefix tokens before each synthetic prompt")
    prefix_groups: int = _f(1, "distinct shared prefixes; sample i uses group i mod groups")
    prefix_cache_hit_rate: float = _f(0.0, "target prefix-cache hit rate in (0, 1): judged "
                                      "against the server's cached_tokens; 0 = none")
    prefix_cache_tolerance: float = _f(0.05, "how far the achieved hit rate may be from "
                                       "prefix_cache_hit_rate (absolute)")
    tokenizer: str = _f("approx", "token counting: `approx` (words), `bytes`, or PATH of a "
                        "tokenizer.json or a tiktoken-style ranks file")
    workload_rng_seed: int = _f(8470324591232611257, "seed of the prompts' lengths and text")
    turns: LengthDist | None = _f(  # noqa: RUF009 - _f makes a field()
        None, "turns per multi-turn session: a number or {dist = ...}; unset = single requests")
    think_time_ms: float | LengthDist = _f(  # noqa: RUF009 - _f makes a field()
        0.0, "between a session's answer and its next turn: ms or {dist = ...} (whole ms)")
    dataset_turns: bool = _f(False, "dataset_format = \"sharegpt\": each conversation is a "
                             "multi-turn session of its human turns, in order")
    session_file: str = _f("", "agentic jobs (JSON or JSONL): steps of requests, fanned out "
                           "and in, with think gaps; started at the plan's arrivals")
    job_deadline_ms: float = _f(0.0, "session_file: a job's end-to-end deadline (its arrival "
                                "to its last answer), judged with early stopping; 0 = none")
    goodput_ttft_ms: float = _f(0.0, "goodput SLO on TTFT; 0 = ttft_latency_ms (or none)")
    goodput_tpot_ms: float = _f(0.0, "goodput SLO on TPOT; 0 = tpot_latency_ms (or none)")
    goodput_itl_ms: float = _f(0.0, "goodput SLO on every gap between tokens; 0 = none")
    goodput_e2e_ms: float = _f(0.0, "goodput SLO on end-to-end latency; 0 = none")
    energy: str = _f("auto", "`auto`: sample every readable GPU (NVML) and CPU package (RAPL) "
                     "over the run; `off`: none")
    energy_sample_hz: float = _f(10.0, "energy readings per second, in (0, 1000]")
    energy_idle_s: float = _f(1.0, "idle baseline sampled before the run; 0 = none")
    judge_error_adjusted: bool = _f(False, "also judge the SLO percentile with failed and "
                                    "unfinished queries counted as infinitely slow")
    endpoint_probe: bool = _f(False, "before the run, ask an HTTP endpoint what it is "
                              "(/v1/models, /version, /v2) and time a few health round trips")
    server_metrics: str = _f("off", "scrape the server's Prometheus metrics over the run: "
                             "`off`, `auto` (the endpoint's /metrics) or a URL")
    server_metrics_interval_s: float = _f(1.0, "seconds between scrapes of server_metrics")
    server_metrics_raw: bool = _f(False, "also keep the series no server mapping names")

    @property
    def compliant(self) -> bool:
        """Whether the run follows MLPerf's minimums (the `dev` preset does not)."""
        return self.preset == "mlperf"

    def as_dict(self) -> dict[str, Any]:
        """Plain values, for result.json."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)} | {
            "scenario": str(self.scenario),
            "steps": [list(step) for step in self.steps],
            "compliant": self.compliant,
            "input_tokens": None if self.input_tokens is None else self.input_tokens.as_dict(),
            "output_tokens": None if self.output_tokens is None else self.output_tokens.as_dict(),
            "turns": None if self.turns is None else self.turns.as_dict(),
            "think_time_ms": think_time_dict(self.think_time_ms),
        }


def issue_mode(settings: TestSettings) -> IssueMode:
    """How a test definition's queries go out (the one place this is decided)."""
    s = settings
    if s.mode == "accuracy":
        return IssueMode.ACCURACY
    if s.scenario is Scenario.OFFLINE:
        return IssueMode.OFFLINE
    if s.scenario is not Scenario.SERVER or s.arrival == "closed":
        return IssueMode.CLOSED
    return IssueMode.OPEN


SCENARIO_DEFAULTS: dict[Scenario, dict[str, Any]] = {
    Scenario.SINGLE_STREAM: {"target_latency_percentile": 90.0, "min_query_count": 1024},
    Scenario.MULTI_STREAM: {"target_latency_percentile": 99.0, "min_query_count": 270336,
                            "samples_per_query": 8},
    Scenario.SERVER: {"target_latency_percentile": 99.0, "min_query_count": 270336},
    Scenario.OFFLINE: {"target_latency_percentile": 99.0, "min_query_count": 1},
}

DEV_PRESET: dict[str, Any] = {"min_duration_s": 5.0, "min_query_count": 100}
EARLY_STOPPING_CONFIDENCE = 0.99


def dev_token_queries(percentile: float) -> int:
    """The fewest requests a dev token run needs to pass early stopping at `percentile`
    with none over (459 at p99): a dev preset that cannot be VALID helps nobody."""
    return max(int(DEV_PRESET["min_query_count"]),
               math.ceil(math.log(1 - EARLY_STOPPING_CONFIDENCE) / math.log(percentile / 100)))


def _token_run(values: dict[str, Any]) -> bool:
    return any(values.get(k) not in (None, "", False)
               for k in ("input_tokens", "dataset", "mlperf_model", "use_token_latencies",
                         "session_file"))

_FIELDS = {f.name: f for f in dataclasses.fields(TestSettings)}
_INT_KEYS = {n for n, f in _FIELDS.items() if f.type == "int"}
_FLOAT_KEYS = {n for n, f in _FIELDS.items() if f.type == "float"}
_BOOL_KEYS = {n for n, f in _FIELDS.items() if f.type == "bool"}
_PATH_KEYS = ("trace_file", "schedule_file", "dataset", "session_file")
_RELATIVE_KEYS = (*_PATH_KEYS, "tokenizer")  # a tokenizer file is relative to the definition
_LENGTH_KEYS = ("input_tokens", "output_tokens", "turns")


def _coerce(key: str, value: Any, problems: list[str]) -> Any:
    if key not in _FIELDS:
        problems.append(f"{key}: unknown key{suggest(key, _FIELDS)}")
        return None
    if key == "scenario":
        try:
            return Scenario(value)
        except ValueError:
            names = ", ".join(s.value for s in Scenario)
            problems.append(f"scenario: {value!r} is not one of {names}")
            return None
    if key == "steps":
        return _coerce_steps(value, problems)
    if key in _LENGTH_KEYS:
        return parse_length(key, value, problems)
    if key == "think_time_ms":
        return parse_think_time(value, problems)
    if key in _BOOL_KEYS:
        if not isinstance(value, bool):
            problems.append(f"{key}: expected true or false, got {value!r}")
            return None
        return value
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


def _coerce_steps(value: Any, problems: list[str]) -> tuple[tuple[float, float], ...] | None:
    """[[start_s, qps], ...] -> a tuple of float pairs (TOML arrays, or tuples from Python)."""
    if not isinstance(value, list | tuple):
        problems.append(f"steps: expected an array of [start_s, qps] pairs, got {value!r}")
        return None
    out = []
    for i, step in enumerate(value):
        ok = isinstance(step, list | tuple) and len(step) == 2 and all(
            isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)
            for x in step)
        if not ok:
            problems.append(f"steps: step {i} must be [start_s, qps] (two numbers), got {step!r}")
            return None
        out.append((float(step[0]), float(step[1])))
    return tuple(out)


def _check_steps(s: TestSettings, problems: list[str]) -> None:
    if not s.steps:
        problems.append("steps: arrival 'steps' needs steps = [[0, qps], [start_s, qps], ...]")
        return
    starts = [t for t, _ in s.steps]
    if starts[0] != 0:
        problems.append(f"steps: the first step must start at 0, not {starts[0]:g}")
    if any(b <= a for a, b in itertools.pairwise(starts)):
        problems.append("steps: start times must increase strictly")
    if any(qps < 0 for _, qps in s.steps):
        problems.append("steps: a rate must not be negative")
    if s.steps[-1][1] <= 0:
        problems.append("steps: the last step needs a positive rate (it lasts to the end)")
    if len(s.steps) > MAX_STEPS:
        problems.append(f"steps: at most {MAX_STEPS} steps, got {len(s.steps)}")
    end_s = s.warmup_s + s.min_duration_s
    late = [t for t in starts if t >= end_s]
    if late and s.scenario is Scenario.SERVER:
        problems.append(f"steps: a step starts at {late[0]:g} s, at or after the run's minimum "
                        f"end {end_s:g} s (warmup_s + min_duration_s): raise min_duration_s")


def _check_arrival(s: TestSettings, problems: list[str]) -> None:
    """The keys of the chosen arrival process, and several load processes."""
    if s.burstiness <= 0:
        problems.append(f"burstiness: must be above 0, got {s.burstiness!r}")
    for key in ("burst_qps_factor", "time_scale", "window_s"):
        if getattr(s, key) <= 0:
            problems.append(f"{key}: must be above 0, got {getattr(s, key)!r}")
    for key in ("burst_start_s", "burst_duration_s", "burst_period_s"):
        if getattr(s, key) < 0:
            problems.append(f"{key}: must not be negative, got {getattr(s, key)!r}")
    if s.arrival == "burst" and s.burst_duration_s <= 0:
        problems.append("burst_duration_s: arrival 'burst' needs a burst longer than 0 s")
    if s.burst_period_s and s.burst_period_s <= s.burst_duration_s:
        problems.append("burst_period_s: must be longer than burst_duration_s (or 0)")
    if s.arrival == "steps":
        _check_steps(s, problems)
    if s.arrival == "trace" and not s.trace_file:
        problems.append("trace_file: arrival 'trace' needs a trace file")
    if s.trace_format not in TRACE_FORMATS:
        problems.append(f"trace_format: {s.trace_format!r} is not one of "
                        f"{', '.join(TRACE_FORMATS)}")
    if s.trace_block_tokens < 1:
        problems.append(f"trace_block_tokens: must be at least 1, got {s.trace_block_tokens!r}")
    for key in _PATH_KEYS:
        path = getattr(s, key)
        if path and (key == "schedule_file" or s.arrival == "trace") and not Path(path).is_file():
            problems.append(f"{key}: no such file {path!r}")
    mode = issue_mode(s)
    if s.schedule_file and mode is not IssueMode.OPEN:
        problems.append("schedule_file: a saved schedule replays open-loop arrivals only")
    if s.worker_cpus:
        try:
            parse_cpus(s.worker_cpus)
        except ValueError as exc:
            problems.append(f"worker_cpus: {exc}")
    if s.workers < 1:
        problems.append(f"workers: must be at least 1, got {s.workers!r}")
    elif s.workers > 1:
        if mode is IssueMode.CLOSED:
            what = "closed-loop arrivals" if s.scenario is Scenario.SERVER else str(s.scenario)
            problems.append(f"workers: {what} need a single issuer (each query waits for "
                            "a completion); use workers = 1")
        elif mode in (IssueMode.OFFLINE, IssueMode.ACCURACY):
            problems.append("workers: Offline and accuracy runs issue from one process; "
                            "use workers = 1")


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
    if not 0 < s.energy_sample_hz <= MAX_ENERGY_HZ:
        problems.append(f"energy_sample_hz: must be in (0, {MAX_ENERGY_HZ:g}], got "
                        f"{s.energy_sample_hz!r}")
    if s.energy_idle_s < 0:
        problems.append(f"energy_idle_s: must not be negative, got {s.energy_idle_s!r}")
    if not 0 < s.server_metrics_interval_s <= 3600:
        problems.append("server_metrics_interval_s: must be in (0, 3600], got "
                        f"{s.server_metrics_interval_s!r}")
    if s.server_metrics not in ("off", "auto") and not s.server_metrics.startswith(
            ("http://", "https://")):
        problems.append(f"server_metrics: {s.server_metrics!r} is not off, auto or an "
                        "http(s):// URL")
    if not 0 <= s.accuracy_target <= 1:
        problems.append(f"accuracy_target: must be in [0, 1], got {s.accuracy_target!r}")
    for key, allowed in (("arrival", ARRIVALS), ("preset", PRESETS), ("mode", MODES),
                         ("energy", ENERGY)):
        if getattr(s, key) not in allowed:
            problems.append(f"{key}: {getattr(s, key)!r} is not one of {', '.join(allowed)}")
    _check_arrival(s, problems)
    rate_from_target = s.arrival not in ("closed", "steps", "trace") and not s.schedule_file
    if s.scenario is Scenario.SERVER and rate_from_target and s.target_qps <= 0:
        problems.append("target_qps: Server needs a positive rate")
    if s.scenario is Scenario.SERVER and s.target_latency_ms <= 0 and not s.use_token_latencies:
        problems.append("target_latency_ms: Server needs a latency SLO above 0 (or "
                        "use_token_latencies with ttft_latency_ms and tpot_latency_ms)")
    _check_tokens(s, problems)
    if s.performance_sample_count > s.total_sample_count:
        problems.append("performance_sample_count: larger than total_sample_count")
    if s.max_duration_s and s.max_duration_s < s.min_duration_s:
        problems.append("max_duration_s: shorter than min_duration_s")
    if s.max_query_count and s.max_query_count < s.min_query_count:
        problems.append("max_query_count: smaller than min_query_count")


def _check_tokens(s: TestSettings, problems: list[str]) -> None:
    """The token workload and token-mode keys."""
    for key in ("ttft_latency_ms", "tpot_latency_ms", "goodput_ttft_ms", "goodput_tpot_ms",
                "goodput_itl_ms", "goodput_e2e_ms", "prefix_tokens"):
        if getattr(s, key) < 0:
            problems.append(f"{key}: must not be negative, got {getattr(s, key)!r}")
    if s.prefix_groups < 1:
        problems.append(f"prefix_groups: must be at least 1, got {s.prefix_groups!r}")
    check_prefix_cache(s, problems)
    if is_file_tokenizer(s.tokenizer) and not Path(s.tokenizer).is_file():
        problems.append(f"tokenizer: {s.tokenizer!r} is not approx, bytes or a tokenizer file "
                        "(tokenizer.json, or a tiktoken-style ranks file)")
    if s.mlperf_model and s.mlperf_model not in LLM_PRESETS:
        problems.append(f"mlperf_model: {s.mlperf_model!r} is not one of "
                        f"{', '.join(LLM_PRESETS)}{suggest(s.mlperf_model, LLM_PRESETS)}")
    if s.use_token_latencies and s.scenario is Scenario.SERVER:
        for key in ("ttft_latency_ms", "tpot_latency_ms"):
            if getattr(s, key) <= 0:
                problems.append(f"{key}: token mode on Server needs a bound above 0")
    lines = s.dataset_format == "lines"
    if s.dataset_format not in DATASET_FORMATS:
        problems.append(f"dataset_format: {s.dataset_format!r} is not one of "
                        f"{', '.join(DATASET_FORMATS)}")
    if s.dataset and s.input_tokens is not None and not lines:
        problems.append("input_tokens: a dataset brings its own prompts; set one or the other")
    if s.dataset and lines and s.input_tokens is None:
        problems.append("input_tokens: a line pool (dataset_format = \"lines\") needs the "
                        "prompts' length")
    for key in ("dataset_min_input", "dataset_max_input", "dataset_min_output",
                "dataset_max_output", "dataset_samples"):
        if getattr(s, key) < 0:
            problems.append(f"{key}: must not be negative, got {getattr(s, key)!r}")
    if s.dataset and not Path(s.dataset).is_file():
        problems.append(f"dataset: no such file {s.dataset!r}")
    if s.prefix_tokens and s.input_tokens is None:
        problems.append("prefix_tokens: shared prefixes go before synthetic prompts "
                        "(set input_tokens)")
    check_turns(s, issue_mode(s) is IssueMode.OPEN,
                s.input_tokens is not None or bool(s.dataset), problems)
    check_jobs(s, issue_mode(s) is IssueMode.OPEN, problems)


def settings_from_mapping(values: dict[str, Any]) -> TestSettings:
    """Build validated settings from flat key/values over scenario and preset defaults."""
    problems: list[str] = []
    coerced = {k: _coerce(k, v, problems) for k, v in values.items()}
    scenario = coerced.get("scenario") or Scenario.SERVER
    layered: dict[str, Any] = dict(SCENARIO_DEFAULTS[scenario])
    if coerced.get("preset") == "dev":
        layered |= DEV_PRESET
        if scenario is Scenario.SERVER and _token_run(coerced):
            percentile = coerced.get("target_latency_percentile") or \
                layered["target_latency_percentile"]
            layered["min_query_count"] = dev_token_queries(percentile)
    if coerced.get("mlperf_model") in LLM_PRESETS:
        layered |= llm_preset(coerced["mlperf_model"])
    layered |= {k: v for k, v in coerced.items() if v is not None}
    settings = TestSettings(**layered)
    _check(settings, problems)
    if problems:
        raise SettingsError(problems)
    return settings


def settings_from_record(values: dict[str, Any]) -> TestSettings:
    """The settings a saved result recorded, as they were: types restored, nothing checked.

    A recorded run stays readable when, say, its trace file has moved since;
    keys this version does not know are left out.
    """
    known = {k: v for k, v in values.items() if k in _FIELDS}
    if "scenario" in known:
        known["scenario"] = Scenario(known["scenario"])
    if "steps" in known:
        known["steps"] = tuple((float(a), float(b)) for a, b in known["steps"])
    for key in _LENGTH_KEYS:
        if known.get(key) is not None:
            known[key] = parse_length(key, known[key], [])
    if "think_time_ms" in known:
        known["think_time_ms"] = parse_think_time(known["think_time_ms"], [])
    return TestSettings(**known)


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
        for key in _RELATIVE_KEYS:  # a file named in a test definition is relative to it
            if isinstance(values.get(key), str) and values[key] and (
                    key != "tokenizer" or is_file_tokenizer(values[key])):
                values[key] = str(Path(path).parent / values[key])
    return settings_from_mapping(values | parse_overrides(overrides or []))
