"""result.json: the versioned record of one run, as a typed `RunResult`, written and read back.

Schema (version 2), every latency in integer nanoseconds:

    schema_version, scenario, mode, valid, reasons[], reason_codes[], warnings[],
    headline{name, value}, settings{...}, plan{...}, seeds{qsl, sample_index, schedule},
    sut{...}, environment{...}, schedule{...}, queries, samples, errors, errors_by_kind{},
    unfinished, interrupted, duration_s, qps_scheduled, qps_completed, samples_per_s,
    goodput_qps, overlatency, latency_ns, service_latency_ns, issue_lag_ns,
    query_latency_ns   (p50 p90 p95 p99 p999 mean min max count each; latency_ns counts
        from the scheduled time), target_latency_at_ns, components_ns{name: summary + share},
    batch_sizes{size: count}, early_stopping{...}, accuracy (accuracy mode), timeline[],
    steps[], histograms{name: HDR V2 base64}, workers (several load processes),
    distributed (several workers: engine, clocks, skew bound, lost workers);
    a token-stream run adds ttft_ns, ttfo_ns, e2e_ns (each with from_send), tpot_ns,
    itl_ns, chunk_gap_ns, normalized_latency_ns, longest_stall_ns, tokens{}, goodput{},
    token_early_stopping{}, token_histograms{}, turns{} (multi-turn) (judge.tokenstats);
    energy{measured, reason, devices[], method, sample_hz, idle_w, avg_w, peak_w, joules,
        joules_per_query, qps_per_watt, ...} (see `judge.energy`);
    server_metrics{source, interval_s, scrapes, failed_scrapes, errors[], servers[],
        window_s, series{name: [[t_s, value]]}, deltas{prefix_cache_hit_rate, preemptions,
        kv_cache_usage_max, ...}, histograms{name: {count, mean_ns, p50_ns, ...}}, raw,
        reason} when `server_metrics` is not off (see `judge.servermetrics`);
    sut_memory{where, host_rss_peak_bytes, gpu_memory_peak_bytes, source} (`record.memory`);
    endpoint{base, identity, gpu, baseline_rtt} with `endpoint_probe` (`record.provenance`)

Version 1 lacked `plan`, `reason_codes` and `target_latency_at_ns`; it still reads
(the codes are recovered from the reasons' prose, which version 1 wrote the same way).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.adapters.safetext import safe_tree
from loadgen.errors import ResultError
from loadgen.judge.energy import EnergyFigures
from loadgen.judge.servermetrics import ServerMetrics
from loadgen.judge.stats import RunStats
from loadgen.judge.verdict import Headline, Reason, ReasonCode, Verdict
from loadgen.plan.settings import TestSettings, settings_from_record
from loadgen.record.distributed import Distributed

__all__ = ["RESULT_FILE", "SCHEMA_VERSION", "RunResult", "read_result", "write_result"]

SCHEMA_VERSION = 2
RESULT_FILE = "result.json"
_READABLE = (1, 2)
_V1_CODES = (  # (start of a version-1 reason, its code), first match wins
    ("the run was interrupted", ReasonCode.INTERRUPTED),
    ("measured duration", ReasonCode.MIN_DURATION),
    ("accuracy", ReasonCode.ACCURACY),
    ("p99 issue lag", ReasonCode.ISSUE_LAG),
)


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run: what was asked, what was planned, what happened and the judgement."""

    settings: TestSettings
    plan: dict[str, Any]  # RunPlan.as_dict(); empty for a version-1 result
    stats: RunStats
    verdict: Verdict
    headline: Headline
    sut: dict[str, Any]
    environment: dict[str, Any]
    schedule: dict[str, Any]
    workers: dict[str, Any] | None = None
    energy: EnergyFigures | None = None  # None: a result written before energy was measured
    distributed: Distributed | None = None  # several workers (`record.distributed`)
    server_metrics: ServerMetrics | None = None  # None: not asked (`server_metrics = "off"`)
    sut_memory: dict[str, Any] | None = None  # peak host RSS and GPU memory (`record.memory`)
    endpoint: dict[str, Any] | None = None  # what the endpoint said of itself, its round trip

    @property
    def valid(self) -> bool:
        """Whether the run is VALID."""
        return self.verdict.valid

    def to_dict(self) -> dict[str, Any]:
        """The result.json document."""
        s = self.settings
        doc: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "scenario": str(s.scenario),
            "mode": s.mode,
            "valid": self.verdict.valid,
            "reasons": [r.text for r in self.verdict.reasons],
            "reason_codes": [str(r.code) for r in self.verdict.reasons],
            "warnings": list(self.verdict.warnings),
            "headline": {"name": self.headline.name, "value": self.headline.value},
            "settings": s.as_dict(),
            "plan": self.plan,
            "seeds": {"qsl": s.qsl_rng_seed, "sample_index": s.sample_index_rng_seed,
                      "schedule": s.schedule_rng_seed},
            "sut": self.sut,
            "environment": self.environment,
            "schedule": self.schedule,
            **self.stats.as_dict(),
        }
        accuracy = self.stats.accuracy
        if accuracy is not None and accuracy.value is not None:
            doc["accuracy"] = {"value": accuracy.value, "target": s.accuracy_target,
                               "samples": accuracy.samples}
        if self.workers is not None:
            doc["workers"] = self.workers
        if self.energy is not None:
            doc["energy"] = self.energy.as_dict()
        if self.distributed is not None:
            doc["distributed"] = self.distributed.as_dict()
        if self.server_metrics is not None:
            doc["server_metrics"] = self.server_metrics.as_dict()
        if self.sut_memory is not None:
            doc["sut_memory"] = self.sut_memory
        if self.endpoint is not None:
            doc["endpoint"] = self.endpoint
        return doc

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RunResult:
        """Read a result.json document of schema version 1 or 2 (written back, it is version 2)."""
        codes = doc.get("reason_codes") or [_v1_code(text) for text in doc["reasons"]]
        reasons = tuple(Reason(ReasonCode(code), text)
                        for code, text in zip(codes, doc["reasons"], strict=True))
        return cls(
            settings=settings_from_record(doc["settings"]),
            plan=dict(doc.get("plan") or {}),
            stats=RunStats.from_dict(doc),
            verdict=Verdict(bool(doc["valid"]), reasons, tuple(doc.get("warnings", ()))),
            headline=Headline(str(doc["headline"]["name"]), float(doc["headline"]["value"])),
            sut=dict(doc.get("sut") or {}),
            environment=dict(doc.get("environment") or {}),
            schedule=dict(doc.get("schedule") or {}),
            workers=doc.get("workers"),
            energy=EnergyFigures.from_dict(doc["energy"]) if "energy" in doc else None,
            distributed=Distributed.from_dict(doc["distributed"])
            if isinstance(doc.get("distributed"), dict) else None,
            server_metrics=ServerMetrics.from_dict(doc["server_metrics"])
            if isinstance(doc.get("server_metrics"), dict) else None,
            sut_memory=doc.get("sut_memory"),
            endpoint=doc.get("endpoint"),
        )


def _v1_code(text: str) -> ReasonCode:
    """A version-1 reason's code, from the prose every version-1 rule wrote."""
    for start, code in _V1_CODES:
        if text.startswith(start):
            return code
    if " samples completed, Offline needs" in text:
        return ReasonCode.MIN_SAMPLES
    if " queries completed, below min_query_count" in text:
        return ReasonCode.MIN_QUERIES
    if " queries failed (" in text:
        return ReasonCode.ERRORS
    if " queries over " in text and ": early stopping at p" in text:
        return ReasonCode.EARLY_STOPPING
    raise ValueError(f"a reason no version-1 rule wrote: {text!r}")


def write_result(out_dir: Path, result: RunResult) -> Path:
    """Write result.json atomically (a crash never leaves half a file)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RESULT_FILE
    tmp = path.with_suffix(".json.tmp")
    with open(tmp, "w") as out:  # on disk before it takes the name (a crash, a power cut)
        out.write(json.dumps(result.to_dict(), indent=2, sort_keys=False) + "\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, path)
    return path


def read_result(path: Path) -> RunResult:
    """Load a result.json (or the one inside a run directory)."""
    if path.is_dir():
        path = path / RESULT_FILE
    try:
        doc = safe_tree(json.loads(path.read_text()))  # a file from outside: no lone surrogates
    except (OSError, ValueError) as exc:
        raise ResultError(f"{path}: cannot read result: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema_version") not in _READABLE:
        raise ResultError(f"{path}: not a loadgen result of schema version "
                          f"{' or '.join(map(str, _READABLE))}")
    try:
        return RunResult.from_dict(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise ResultError(f"{path}: malformed result: {exc!r}") from None
