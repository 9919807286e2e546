"""`loadgen run --mlperf-logs`: LoadGen's log files beside a run's result.json.

The run's effective settings are read off its plan in LoadGen's names; the
logs then come from the same writers as the drop-in's. A run here has no
harness bytes, so its accuracy log is empty; token figures come with the
drop-in, which holds the token histograms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.mlperf.figures import LogRun
from loadgen.mlperf.logs import log_names, write_logs
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import IssueMode, Scenario
from loadgen.report.result import RunResult

__all__ = ["effective_of_plan", "write_run_logs"]


def effective_of_plan(plan: RunPlan) -> dict[str, Any]:
    """A plan's settings under LoadGen's `effective_*` names and units."""
    s = plan.settings
    offline = plan.issue_mode is IssueMode.OFFLINE
    samples = plan.offline_sample_count if offline else plan.samples_per_query
    queries = 1 if offline else plan.min_query_count
    return {
        "scenario": str(s.scenario),
        "test_mode": "AccuracyOnly" if plan.issue_mode is IssueMode.ACCURACY
        else "PerformanceOnly",
        "samples_per_query": samples, "target_qps": s.target_qps,
        "target_latency_ns": plan.slo_ns,
        "target_latency_percentile": s.target_latency_percentile / 100,
        "max_async_queries": plan.concurrency if s.scenario is not Scenario.SERVER else 0,
        "target_duration_ms": 0 if offline else round(plan.min_duration_ns / 1e6),
        "min_duration_ms": round(plan.min_duration_ns / 1e6),
        "max_duration_ms": round(plan.max_duration_ns / 1e6),
        "min_query_count": queries, "max_query_count": plan.max_query_count,
        "min_sample_count": queries * samples,
        "qsl_rng_seed": s.qsl_rng_seed, "sample_index_rng_seed": s.sample_index_rng_seed,
        "schedule_rng_seed": s.schedule_rng_seed, "accuracy_log_rng_seed": 0,
        "accuracy_log_probability": 0.0, "accuracy_log_sampling_target": 0,
        "print_timestamps": False, "performance_issue_unique": False,
        "performance_issue_same": False, "performance_issue_same_index": 0,
        "performance_sample_count": plan.library.performance_count,
        "accuracy_sample_count": plan.library.total, "sample_concatenate_permutation": False,
        "use_token_latencies": s.use_token_latencies,
        "ttft_latency": plan.token_targets.ttft_ns, "tpot_latency": plan.token_targets.tpot_ns,
    }


def write_run_logs(plan: RunPlan, result: RunResult, out_dir: Path) -> dict[str, Path]:
    """Write the three log files (summary, detail, accuracy) into `out_dir`; their paths."""
    accuracy = plan.issue_mode is IssueMode.ACCURACY
    effective = effective_of_plan(plan)
    run = LogRun(scenario=str(plan.settings.scenario), mode=effective["test_mode"],
                 effective=effective, result=None if accuracy else result,
                 sut_name=str(result.sut.get("name") or result.sut.get("model") or "loadgen"),
                 total=plan.library.total, performance_count=plan.library.performance_count,
                 loaded=plan.library.loaded_indices().tolist())
    paths = log_names(out_dir)
    write_logs(run, paths)
    return {k: v for k, v in paths.items() if k != "trace"}
