"""result.json's `distributed` block as a typed record: the engine, each worker's clock, the
skew bound and the workers lost.

The driver (`engine.workers.driver`) builds it; the judge (`judge.distributed`) and the
summary read it; `as_dict` writes result.json's form and `from_dict` reads it back. What the
engine says of itself (`Engine.describe`: engine, version, nodes, and for Ray its address)
leads the block, as it always has; keys beyond the first three stay in `engine_extra`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Distributed", "LostWorker", "WorkerClock"]


@dataclass(frozen=True, slots=True)
class WorkerClock:
    """One worker's clock: its offset from the driver's (worker minus driver) and that
    offset's error, measured before and after the run (drift), its start and silences."""

    index: int
    host: str
    node: str
    status: str  # "done" or "lost"
    offset_ns: int
    offset_error_ns: int
    rtt_ns: int
    start_lateness_ns: int
    start_slack_ns: int | None  # None: the worker never said (lost before its start)
    drift_ns: int
    offset_after_ns: int | None  # None: not measured again (lost)
    offset_after_error_ns: int | None
    longest_silence_s: float

    @property
    def uncertainty_ns(self) -> int:
        """Its offset error plus the size of its drift (what the skew bound adds up)."""
        return self.offset_error_ns + abs(self.drift_ns)


@dataclass(frozen=True, slots=True)
class LostWorker:
    """A worker given up: who, where, when, why, and what of its share never went out."""

    index: int
    label: str
    host: str
    why: str
    lost_at_s: float
    last_report_scheduled_s: float
    planned: int
    issued: int
    missing: int
    in_flight_at_last_report: int


_ENGINE_KEYS = ("engine", "version", "nodes")


@dataclass(frozen=True, slots=True)
class Distributed:
    """A run spread over workers: where, how their clocks lined up, who was lost."""

    engine: str
    version: str | None
    nodes: int
    split: str
    hosts: int
    start_ns: int  # T0 on the driver's clock
    start_margin_ns: int
    release_cost_ns: int
    skew_bound_ns: int
    workers: tuple[WorkerClock, ...]
    lost: tuple[LostWorker, ...] = ()
    engine_extra: dict[str, Any] = field(default_factory=dict)
    """The rest of what the engine said of itself (Ray: `address`), written after `nodes`."""

    @classmethod
    def of(cls, described: dict[str, Any], **figures: Any) -> Distributed:
        """The block from the engine's `describe()` and the driver's figures."""
        extra = {k: v for k, v in described.items() if k not in _ENGINE_KEYS}
        return cls(engine=str(described["engine"]), version=described.get("version"),
                   nodes=described.get("nodes", 0), engine_extra=extra, **figures)

    def as_dict(self) -> dict[str, Any]:
        """result.json's `distributed`."""
        out: dict[str, Any] = {"engine": self.engine, "version": self.version,
                               "nodes": self.nodes, **self.engine_extra}
        for f in dataclasses.fields(self):
            if f.name in _ENGINE_KEYS or f.name == "engine_extra":
                continue
            value = getattr(self, f.name)
            out[f.name] = ([dataclasses.asdict(x) for x in value]
                           if f.name in ("workers", "lost") else value)
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Distributed:
        """Read back `as_dict`."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names - {"workers", "lost"}},
                   workers=tuple(WorkerClock(**w) for w in doc.get("workers", ())),
                   lost=tuple(LostWorker(**x) for x in doc.get("lost", ())),
                   engine_extra={k: v for k, v in doc.items() if k not in names})
