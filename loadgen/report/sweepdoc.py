"""A sweep's document as typed records: sweep.json, its points, each metric's spread.

`campaigns.sweep` writes it; the tables, headlines, report.html and the CLI read it back
(`SweepDocument.from_dict`) and use attributes. `as_dict` gives the JSON form, key for key
as sweeps have always written it.

A point: `index`, `values` (axis key -> value), `sut`, `dir`, `launch_dirs`, `settings`,
`sut_description`, `row` (`report.rows`, medians over launches), `stats` (metric ->
median, min, max, cv, n), `noisy`, `noisy_metrics`, `valid_launches`, `duration_s`,
`batcher` (a remote server's knobs in force, with batcher axes only), `headline`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from loadgen.report.docdict import document_dict

__all__ = ["MetricSpread", "SweepDocument", "SweepPoint"]


@dataclass(frozen=True, slots=True)
class MetricSpread:
    """One metric over a point's launches: median, min, max, CV (None with one launch), n."""

    median: float
    min: float
    max: float
    cv: float | None
    n: int


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """One grid point: what was swept to, where its launches lie, their median and spread."""

    index: int
    values: dict[str, Any]  # axis key -> value
    sut: str
    dir: str
    launch_dirs: tuple[str, ...]
    settings: dict[str, Any]  # the point's settings, as written (`TestSettings.as_dict`)
    sut_description: dict[str, Any]
    row: dict[str, Any]  # the at-a-glance row (`report.rows.point_row`)
    stats: dict[str, MetricSpread]
    noisy: bool
    noisy_metrics: tuple[str, ...]
    valid_launches: int
    duration_s: float  # median over launches
    batcher: dict[str, Any] | None = None  # the remote knobs in force (batcher axes)
    headline: str = ""

    @property
    def launches(self) -> int:
        """How many launches the point ran."""
        return self.stats["headline"].n

    def as_dict(self) -> dict[str, Any]:
        """The point's JSON form."""
        return document_dict(self, {"stats": lambda stats: {
            k: dataclasses.asdict(s) for k, s in stats.items()}}, omit_none=("batcher",))

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> SweepPoint:
        """Read back `as_dict`."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names} | {
            "launch_dirs": tuple(doc["launch_dirs"]),
            "stats": {k: MetricSpread(**s) for k, s in doc["stats"].items()},
            "noisy_metrics": tuple(doc.get("noisy_metrics", ()))})


@dataclass(frozen=True, slots=True)
class SweepDocument:
    """sweep.json: the grid, the metrics aggregated, every point."""

    sut: str
    scenario: str
    grid: dict[str, list[Any]]  # axis key -> its values, in order
    launches: int
    noisy_cv: float
    metrics: tuple[str, ...]
    points: tuple[SweepPoint, ...]
    elapsed_s: float
    kind: str = "sweep"
    schema_version: int = 1

    def as_dict(self) -> dict[str, Any]:
        """sweep.json."""
        return document_dict(self, {"points": lambda points: [p.as_dict() for p in points]})

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> SweepDocument:
        """Read back `as_dict`."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names} | {
            "metrics": tuple(doc["metrics"]),
            "points": tuple(SweepPoint.from_dict(p) for p in doc["points"])})
