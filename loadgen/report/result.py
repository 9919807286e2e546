"""result.json: the versioned record of one run, written and read back.

Schema (version 1), every latency in integer nanoseconds:

    schema_version, scenario, mode, valid, reasons[], warnings[], headline{name, value},
    settings{...}, seeds{qsl, sample_index, schedule}, sut{...}, environment{...},
    queries, samples, errors, errors_by_kind{}, unfinished, interrupted,
    duration_s, qps_scheduled, qps_completed, samples_per_s, goodput_qps, overlatency,
    latency_ns, service_latency_ns, issue_lag_ns, query_latency_ns   (p50 p90 p95 p99 p999
        mean min max count each; latency_ns counts from the scheduled time),
    components_ns{name: summary + share}, batch_sizes{size: count},
    early_stopping{...}, accuracy (accuracy mode), histograms{name: HDR V2 base64}
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loadgen.errors import ResultError
from loadgen.plan.settings import TestSettings
from loadgen.judge.stats import RunStats
from loadgen.judge.verdict import Verdict, headline

__all__ = ["RESULT_FILE", "SCHEMA_VERSION", "build_result", "read_result", "write_result"]

SCHEMA_VERSION = 1
RESULT_FILE = "result.json"


def build_result(settings: TestSettings, stats: RunStats, verdict: Verdict,
                 sut: dict[str, Any], environment: dict[str, Any],
                 extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The result document of one run."""
    name, value = headline(settings, stats)
    figures = asdict(stats)
    figures["batch_sizes"] = {str(k): v for k, v in stats.batch_sizes.items()}
    return {
        "schema_version": SCHEMA_VERSION,
        "scenario": str(settings.scenario),
        "mode": settings.mode,
        "valid": verdict.valid,
        "reasons": list(verdict.reasons),
        "warnings": list(verdict.warnings),
        "headline": {"name": name, "value": value},
        "settings": settings.as_dict(),
        "seeds": {"qsl": settings.qsl_rng_seed, "sample_index": settings.sample_index_rng_seed,
                  "schedule": settings.schedule_rng_seed},
        "sut": sut,
        "environment": environment,
        **figures,
        **(extra or {}),
    }


def write_result(out_dir: Path, result: dict[str, Any]) -> Path:
    """Write result.json atomically (a crash never leaves half a file)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RESULT_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)
    return path


def read_result(path: Path) -> dict[str, Any]:
    """Load a result.json (or the one inside a run directory)."""
    if path.is_dir():
        path = path / RESULT_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ResultError(f"{path}: cannot read result: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA_VERSION:
        raise ResultError(f"{path}: not a loadgen result of schema version {SCHEMA_VERSION}")
    return doc
