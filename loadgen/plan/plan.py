"""The run plan: every fact a run derives from its settings, computed once.

MLPerf LoadGen derives `TestSettingsInternal` from the user's `TestSettings`
once, and everything downstream reads that. Here `RunPlan.of(settings)` does
the same: the issue mode, the SLO and bounds in ns, the query sizes, the
sample library, the arrival process (a trace or saved schedule is read and
checked here, once) and the windows. The engine, the collector, the
statistics and the verdict take the plan; none of them recomputes these.
`as_dict` is written to result.json beside the settings.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, cast

from loadgen.plan.arrivals import (
    ArrivalProcess,
    Burst,
    Constant,
    Gamma,
    Poisson,
    Steps,
    Trace,
)
from loadgen.plan.prefixcache import requested_hit_rate
from loadgen.plan.prompts import PromptSource
from loadgen.plan.qsl import QuerySampleLibrary
from loadgen.plan.settings import IssueMode, Scenario, TestSettings, issue_mode
from loadgen.plan.tokenslo import NO_TOKEN_SLOS, TokenSlos
from loadgen.plan.tracefile import read_schedule, read_trace
from loadgen.plan.workload import prompts_for

__all__ = ["NO_SLO_NS", "NO_WARMUP", "RunPlan", "arrival_for", "describe_process", "token_bounds"]

NO_SLO_NS = 2**62
NO_WARMUP = (IssueMode.ACCURACY, IssueMode.OFFLINE)
"""Issue modes that ignore `warmup_s`: accuracy counts every query, and Offline's one query
is the whole run (MLPerf has no Offline warm-up)."""
"""The latency bound used where a run has no SLO: no latency is ever over it."""

_NS = 1_000_000_000


def _ns(seconds: float) -> int:
    return round(seconds * _NS)


def _offline_sample_count(s: TestSettings) -> int:
    """MLPerf's Offline query size: 10% over the expected rate times the minimum duration.

    In exact decimal arithmetic on the numbers as written: 1.1 * 100 QPS * 60 s is 6600
    samples, not float's 6600.000000000001.
    """
    expected = Fraction(11, 10) * Fraction(repr(s.target_qps)) * Fraction(repr(s.min_duration_s))
    return max(s.min_query_count, math.ceil(expected))


def arrival_for(settings: TestSettings) -> ArrivalProcess:
    """The arrival process a test definition asks for (open loop only).

    A trace or saved schedule is read and checked here; a bad file raises
    SettingsError naming the key.
    """
    s = settings
    if s.schedule_file:
        return read_schedule(s.schedule_file)
    if s.arrival == "constant":
        return Constant(s.target_qps)
    if s.arrival == "gamma":
        return Gamma(s.target_qps, s.burstiness)
    if s.arrival == "burst":
        return Burst(s.target_qps, s.burst_qps_factor, s.burst_start_s, s.burst_duration_s,
                     s.burst_period_s)
    if s.arrival == "steps":
        return Steps(tuple(t for t, _ in s.steps), tuple(q for _, q in s.steps), s.ramp)
    if s.arrival == "trace":
        return read_trace(s.trace_file, s.time_scale, s.trace_format, s.trace_block_tokens)
    return Poisson(s.target_qps)


@dataclass(frozen=True, slots=True)
class RunPlan:
    """What a run does, derived once from its settings; durations in ns, 0 = no limit."""

    settings: TestSettings
    issue_mode: IssueMode
    slo_ns: int  # the latency SLO; 0 = none
    query_timeout_ns: int
    warmup_ns: int  # 0 in accuracy mode and Offline (`NO_WARMUP`): every query counts
    min_duration_ns: int
    max_duration_ns: int
    min_query_count: int
    max_query_count: int
    samples_per_query: int
    offline_sample_count: int  # Offline: the one query's size; 0 otherwise
    concurrency: int  # closed loop: queries kept in flight
    drain_timeout_ns: int
    max_issue_lag_ns: int
    window_ns: int  # the timeline's first window width
    step_starts_ns: tuple[int, ...]  # a stepped run's step starts, from the run's start
    library: QuerySampleLibrary
    arrival: ArrivalProcess | None  # open loop only
    prompts: PromptSource | None = None  # a token workload's prompts, by sample index
    token_targets: TokenSlos = NO_TOKEN_SLOS  # MLPerf token mode: p99 TTFT and TPOT bounds
    goodput_slos: TokenSlos = NO_TOKEN_SLOS  # a request is good when it meets every one set
    cache_hit_requested: float | None = None  # the prefix-cache hit rate the workload asks
    job_deadline_ns: int = 0  # `session_file` jobs: the end-to-end deadline; 0 = none

    @classmethod
    def of(cls, settings: TestSettings) -> RunPlan:
        """The plan of a validated test definition."""
        s = settings
        mode = issue_mode(s)
        offline = _offline_sample_count(s) if mode is IssueMode.OFFLINE else 0
        concurrency = s.concurrency if mode is IssueMode.ACCURACY or (
            mode is IssueMode.CLOSED and s.scenario is Scenario.SERVER) else 1
        prompts = prompts_for(s)
        return cls(
            settings=s,
            issue_mode=mode,
            slo_ns=_ns(s.target_latency_ms / 1e3),
            query_timeout_ns=_ns(s.query_timeout_ms / 1e3),
            warmup_ns=0 if mode in NO_WARMUP else _ns(s.warmup_s),
            min_duration_ns=_ns(s.min_duration_s),
            max_duration_ns=_ns(s.max_duration_s),
            min_query_count=s.min_query_count,
            max_query_count=s.max_query_count,
            samples_per_query=s.samples_per_query,
            offline_sample_count=offline,
            concurrency=concurrency,
            drain_timeout_ns=_ns(s.drain_timeout_s),
            max_issue_lag_ns=_ns(s.max_issue_lag_ms / 1e3),
            window_ns=max(_ns(s.window_s), 1),
            step_starts_ns=tuple(_ns(t) for t, _ in s.steps) if s.arrival == "steps" else (),
            library=QuerySampleLibrary(s.total_sample_count, s.performance_sample_count,
                                       s.qsl_rng_seed),
            arrival=arrival_for(s) if mode is IssueMode.OPEN else None,
            prompts=prompts,
            cache_hit_requested=requested_hit_rate(s, prompts),
            job_deadline_ns=_ns(s.job_deadline_ms / 1e3),
            **token_bounds(s),
        )

    @property
    def open_loop(self) -> bool:
        """Whether queries go out on a precomputed schedule."""
        return self.issue_mode is IssueMode.OPEN

    @property
    def slo_bound_ns(self) -> int:
        """The latency over which a query misses the SLO (`NO_SLO_NS` without one)."""
        return self.slo_ns or NO_SLO_NS

    @property
    def expected_s(self) -> float | None:
        """How long the plan should take (warm-up included), or None when the SUT decides."""
        s = self.settings
        duration = (self.warmup_ns + self.min_duration_ns) / 1e9
        if self.issue_mode is IssueMode.OPEN and s.arrival in ("poisson", "constant", "gamma"):
            return max(duration, self.warmup_ns / 1e9 + self.min_query_count / s.target_qps)
        if self.issue_mode is IssueMode.OFFLINE:
            return duration
        return None

    @property
    def steps(self) -> Steps | None:
        """The step plan of a stepped run, else None."""
        return self.arrival if isinstance(self.arrival, Steps) else None

    def as_dict(self) -> dict[str, Any]:
        """Plain values for result.json (the settings are written beside, not repeated)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
               if f.name not in ("settings", "library", "arrival", "prompts", "token_targets",
                                 "goodput_slos")}
        out["issue_mode"] = str(self.issue_mode)
        out["step_starts_ns"] = list(self.step_starts_ns)
        out["library"] = {"total": self.library.total,
                          "performance_count": self.library.performance_count,
                          "seed": self.library.seed}
        out["arrival"] = None if self.arrival is None else describe_process(self.arrival)
        if self.prompts is not None or self.token_targets.any or self.goodput_slos.any:
            out["tokens"] = {"prompts": _describe_prompts(self.prompts),
                             "targets_ms": self.token_targets.as_dict(),
                             "goodput_slos_ms": self.goodput_slos.as_dict()}
        return out


def _describe_prompts(prompts: PromptSource | None) -> dict[str, Any] | None:
    """A prompt source as plain values (its own `describe` where it has one)."""
    if prompts is None:
        return None
    describe = getattr(prompts, "describe", None)
    return describe() if describe is not None else {"kind": type(prompts).__name__}


def token_bounds(s: TestSettings) -> dict[str, TokenSlos]:
    """`token_targets` (MLPerf token mode) and `goodput_slos` (each 0 falls back on the
    token-mode bound where there is one)."""
    targets = TokenSlos(_ns(s.ttft_latency_ms / 1e3), _ns(s.tpot_latency_ms / 1e3)) \
        if s.use_token_latencies else NO_TOKEN_SLOS
    goodput = TokenSlos(_ns((s.goodput_ttft_ms or s.ttft_latency_ms) / 1e3),
                        _ns((s.goodput_tpot_ms or s.tpot_latency_ms) / 1e3),
                        _ns(s.goodput_itl_ms / 1e3), _ns(s.goodput_e2e_ms / 1e3))
    return {"token_targets": targets, "goodput_slos": goodput}


def describe_process(process: ArrivalProcess) -> dict[str, Any]:
    """An arrival process as plain values: its kind and fields (a trace: source, sha256, size)."""
    names = [f.name for f in dataclasses.fields(cast(Any, process))]
    fields = {name: getattr(process, name) for name in names if name != "offsets_ns"}
    if isinstance(process, Trace):
        fields["queries"] = int(process.offsets_ns.size)
    return {"kind": type(process).__name__.lower(), **fields}
