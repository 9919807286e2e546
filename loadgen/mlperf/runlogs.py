"""`loadgen run --mlperf-logs`: LoadGen's log files beside a run's result.json.

The run's effective settings are read off its plan in LoadGen's names; the
logs then come from the same writers as the drop-in's; token figures come with
the drop-in, which holds the token histograms.

The accuracy log: in accuracy mode, one entry per sample of every query answered,
in completion order, as LoadGen writes it: `seq_id` the query id, `qsl_idx` the
sample's library index, `data` the hex of the sample's output (its row of an
array output, else the whole output's bytes), empty where the SUT kept no output.
An `OutputWatch` monitor hands the run's kept outputs over. In performance mode
the log is an empty list, as LoadGen's is with `accuracy_log_probability` 0.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.mlperf.bridge import AccuracyRow
from loadgen.mlperf.figures import LogRun
from loadgen.mlperf.logs import log_names, write_logs
from loadgen.plan.plan import RunPlan
from loadgen.plan.qsl import accuracy_queries
from loadgen.plan.settings import IssueMode, Scenario
from loadgen.record.watched import Named, Watched
from loadgen.report.result import RunResult

__all__ = ["OutputWatch", "accuracy_rows", "effective_of_plan", "write_run_logs"]


class OutputWatch:
    """A run monitor that keeps the run's live figures, to read the outputs an accuracy
    run's collector kept once it is over (none in performance mode, nor from several
    workers)."""

    def __init__(self) -> None:
        self.figures: Watched | None = None

    def start(self, plan: RunPlan, sut: Named, figures: Watched) -> None:
        """Keep the run's live figures (a `Collector` keeps an accuracy run's outputs)."""
        self.figures = figures

    def stop(self, result: RunResult | None) -> None:
        """Nothing to do: the outputs stay with the collector."""

    @property
    def outputs(self) -> Mapping[int, Any]:
        """Query id -> output, in completion order (empty when none were kept)."""
        return getattr(self.figures, "outputs", None) or {}


def _sample_bytes(output: Any, position: int, samples: int) -> bytes:
    """The bytes of sample `position` of a query of `samples`: its row of an array with one
    row a sample, else the whole output (bytes, text as UTF-8, numbers as their array)."""
    if output is None:
        return b""
    if isinstance(output, bytes | bytearray):
        return bytes(output)
    if isinstance(output, str):
        return output.encode()
    array = np.asarray(output)
    if array.dtype == object:
        return json.dumps(output, default=str).encode()
    if samples > 1 and array.ndim >= 1 and len(array) == samples:
        array = array[position]
    return np.ascontiguousarray(array).tobytes()


def accuracy_rows(plan: RunPlan, outputs: Mapping[int, Any]) -> list[AccuracyRow]:
    """The accuracy log's entries of an accuracy run's `outputs`, in their (completion)
    order: one per sample, seq_id the query id, qsl_idx the sample's index."""
    queries = accuracy_queries(plan.library, plan.samples_per_query)
    rows = []
    for query_id, output in outputs.items():
        indices = queries[query_id]
        rows += [AccuracyRow(query_id, int(index), _sample_bytes(output, i, len(indices)), 0)
                 for i, index in enumerate(indices)]
    return rows


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


def write_run_logs(plan: RunPlan, result: RunResult, out_dir: Path,
                   outputs: Mapping[int, Any] | None = None) -> dict[str, Path]:
    """Write the three log files (summary, detail, accuracy) into `out_dir`; their paths.

    `outputs` (query id -> output, an `OutputWatch`'s) fill an accuracy run's accuracy log.
    """
    accuracy = plan.issue_mode is IssueMode.ACCURACY
    effective = effective_of_plan(plan)
    run = LogRun(scenario=str(plan.settings.scenario), mode=effective["test_mode"],
                 effective=effective, result=None if accuracy else result,
                 sut_name=str(result.sut.get("name") or result.sut.get("model") or "loadgen"),
                 total=plan.library.total, performance_count=plan.library.performance_count,
                 loaded=plan.library.loaded_indices().tolist(),
                 accuracy=accuracy_rows(plan, outputs or {}) if accuracy else ())
    paths = log_names(out_dir)
    write_logs(run, paths)
    return {k: v for k, v in paths.items() if k != "trace"}
