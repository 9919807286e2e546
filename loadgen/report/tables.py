"""CSV and JSON of sweeps and searches: rows from a saved document, written atomically.

sweep.csv: one row per point: `point`, each swept key, `launches`, `valid_launches`,
`noisy`, the point's at-a-glance row (`loadgen.report.rows`: offered and achieved rate,
p50/p99 ms, TTFT/TPOT/ITL p50/p99 ms and tokens/s for token runs, goodput, `valid`,
`reasons`; medians over launches), then `METRIC_median`, `METRIC_min`, `METRIC_max`,
`METRIC_cv` for every metric of `loadgen.campaigns.sweep.METRICS` (latencies in ns; CV
empty with one launch).

probes.csv (find-peak): one row per probe: `index`, `target_qps`, `trial`,
`valid`, `harness_limited`, `slo_ratio`, `qps_scheduled`, `qps_completed`, `goodput_qps`,
`queries`, `overlatency`, `duration_s`, `wall_s`, `p50_ns`, `p99_ns`, `p999_ns`, `dir`,
`reasons` (joined with ' | ').
"""

from __future__ import annotations

import csv
import io
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.report.peakdoc import PeakDocument
from loadgen.report.sweepdoc import SweepDocument

__all__ = ["PROBE_COLUMNS", "csv_text", "search_rows", "sweep_rows", "write_csv", "write_json"]

PROBE_COLUMNS = ("index", "target_qps", "trial", "valid", "harness_limited", "slo_ratio",
                 "qps_scheduled", "qps_completed", "goodput_qps", "queries", "overlatency",
                 "duration_s", "wall_s")


def _atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def write_json(path: Path, doc: Mapping[str, Any]) -> Path:
    """Write a document as indented JSON, atomically."""
    return _atomic(path, json.dumps(doc, indent=2) + "\n")


def csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows as CSV with a header (the first row's keys); empty cells for None."""
    if not rows:
        return ""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    """Write rows as CSV, atomically."""
    return _atomic(path, csv_text(rows))


def sweep_rows(doc: SweepDocument) -> list[dict[str, Any]]:
    """One row per sweep point: swept values, then median/min/max/cv of each metric."""
    rows = []
    for point in doc.points:
        row: dict[str, Any] = {"point": point.index, **point.values,
                               "launches": point.stats[doc.metrics[0]].n,
                               "valid_launches": point.valid_launches,
                               "noisy": point.noisy, **point.row}
        for metric in doc.metrics:
            s = point.stats[metric]
            row |= {f"{metric}_median": s.median, f"{metric}_min": s.min,
                    f"{metric}_max": s.max, f"{metric}_cv": s.cv}
        rows.append(row)
    return rows


def search_rows(doc: PeakDocument) -> list[dict[str, Any]]:
    """One row per find-peak probe."""
    rows = []
    for p in doc.probes:
        rows.append({"index": p.index, "target_qps": p.target_qps, "trial": p.trial,
                     "valid": p.valid, "harness_limited": p.harness_limited,
                     "slo_ratio": p.slo_ratio, "qps_scheduled": p.qps_scheduled,
                     "qps_completed": p.qps_completed, "goodput_qps": p.goodput_qps,
                     "queries": p.queries, "overlatency": p.overlatency,
                     "duration_s": p.duration_s, "wall_s": p.wall_s,
                     "p50_ns": p.latency_ns.p50, "p99_ns": p.latency_ns.p99,
                     "p999_ns": p.latency_ns.p999, "dir": p.dir,
                     "reasons": " | ".join(p.reasons)})
    return rows
