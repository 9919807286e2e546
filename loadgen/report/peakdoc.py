"""find-peak's documents as typed records: a probe (a line of journal.jsonl, an entry of
peak.json's `probes`) and the peak document (peak.json).

`campaigns.search` writes them; the tables, headlines, report.html and the CLI read them back
(`PeakDocument.from_dict`, `Probe.from_dict`) and use attributes. `as_dict` gives the JSON
form, key for key as find-peak has always written it.

A probe: `index`, `target_qps`, `trial`, `dir`, `valid`, `reasons`, `reason_codes`,
`harness_limited`, `slo_ratio`, `latency_at_slo_percentile_ns`, `qps_scheduled`,
`qps_completed`, `goodput_qps`, `queries`, `overlatency`, `errors`, `duration_s`, `wall_s`,
`schedule_rng_seed`, `latency_ns` (summary), `early_stopping`, `row` (`report.rows`); a token
run's probe leads with `goodput`, `ttft_p99_ns`, `tpot_p99_ns`; goal `attainment` adds
`passed`; the journal's lines end with `sut_description`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from loadgen.judge.stats import EarlyStopping
from loadgen.judge.summaries import LatencySummary
from loadgen.judge.tokenstats import Goodput
from loadgen.report.docdict import document_dict

__all__ = ["PeakDocument", "PeakGoal", "PeakSlo", "Probe", "TokenProbe"]


@dataclass(frozen=True, slots=True)
class TokenProbe:
    """A token run's probe figures: its goodput, p99 TTFT and p99 TPOT (ns)."""

    goodput: Goodput
    ttft_p99_ns: int
    tpot_p99_ns: int


@dataclass(frozen=True, slots=True)
class Probe:
    """One find-peak probe: the rate asked, its verdict and figures, where its run lies."""

    index: int
    target_qps: float
    trial: int
    dir: str
    valid: bool
    reasons: tuple[str, ...]
    reason_codes: tuple[str, ...]
    harness_limited: bool
    slo_ratio: float | None  # latency at the SLO percentile / SLO (token mode: the larger)
    latency_at_slo_percentile_ns: int
    qps_scheduled: float
    qps_completed: float
    goodput_qps: float
    queries: int
    overlatency: int
    errors: int
    duration_s: float
    wall_s: float
    schedule_rng_seed: int
    latency_ns: LatencySummary
    early_stopping: EarlyStopping
    row: dict[str, Any]  # the at-a-glance row (`report.rows.run_row`)
    token: TokenProbe | None = None
    passed: bool | None = None  # goal "attainment": whether the attainment held
    sut_description: dict[str, Any] | None = None  # the journal's lines only

    @property
    def outcome(self) -> bool:
        """Whether the probe passed: its attainment (goal `attainment`), else VALID."""
        return self.valid if self.passed is None else self.passed

    def as_dict(self) -> dict[str, Any]:
        """The probe's JSON form."""
        out: dict[str, Any] = {}
        if self.token is not None:
            out |= {"goodput": self.token.goodput.as_dict(),
                    "ttft_p99_ns": self.token.ttft_p99_ns, "tpot_p99_ns": self.token.tpot_p99_ns}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "token" or (f.name in _OPTIONAL and value is None):
                continue
            if isinstance(value, LatencySummary | EarlyStopping):
                value = value.as_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Probe:
        """Read back `as_dict`."""
        names = {f.name for f in dataclasses.fields(cls)} - {"token"}
        values = {k: v for k, v in doc.items() if k in names}
        token = None if "goodput" not in doc else TokenProbe(
            Goodput.from_dict(doc["goodput"]), doc["ttft_p99_ns"], doc["tpot_p99_ns"])
        return cls(**values | {"reasons": tuple(doc["reasons"]),
                               "reason_codes": tuple(doc["reason_codes"]),
                               "latency_ns": LatencySummary.from_dict(doc["latency_ns"]),
                               "early_stopping": EarlyStopping.from_dict(doc["early_stopping"]),
                               "token": token})


_OPTIONAL = ("passed", "sut_description")


@dataclass(frozen=True, slots=True)
class PeakSlo:
    """The latency SLO searched under."""

    percentile: float
    target_latency_ms: float


@dataclass(frozen=True, slots=True)
class PeakGoal:
    """What a probe must do to pass: be VALID, or (`attainment`) keep its SLO attainment at
    or above `min_attainment`."""

    goal: str
    min_attainment: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """{"goal": "valid"} or {"goal": "attainment", "min_attainment": F}."""
        out: dict[str, Any] = {"goal": self.goal}
        if self.min_attainment is not None:
            out["min_attainment"] = self.min_attainment
        return out


@dataclass(frozen=True, slots=True)
class PeakDocument:
    """peak.json: the highest passing rate, its bracket and confidence, every probe."""

    status: str
    peak_qps: float
    bracket: tuple[float | None, float | None]
    confidence: float | None
    confidence_basis: str
    trials_at_low: int
    failures_at_high: int
    harness_high: bool
    slo: PeakSlo
    goal: PeakGoal
    scenario: str
    sut: str
    sut_description: dict[str, Any] | None
    settings: dict[str, Any]  # the settings searched under, as written (`TestSettings.as_dict`)
    config: dict[str, Any]  # the search's knobs (`campaigns.search.SearchConfig`)
    probes: tuple[Probe, ...]
    elapsed_s: float
    headline: str = ""
    kind: str = "find-peak"
    schema_version: int = 1

    def as_dict(self) -> dict[str, Any]:
        """peak.json."""
        return document_dict(self, {"slo": dataclasses.asdict, "goal": PeakGoal.as_dict,
                                    "probes": lambda probes: [p.as_dict() for p in probes]})

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> PeakDocument:
        """Read back `as_dict`."""
        names = {f.name for f in dataclasses.fields(cls)}
        low, high = doc["bracket"]
        goal = doc.get("goal") or {"goal": "valid"}
        return cls(**{k: v for k, v in doc.items() if k in names} | {
            "bracket": (low, high), "slo": PeakSlo(**doc["slo"]),
            "goal": PeakGoal(goal["goal"], goal.get("min_attainment")),
            "probes": tuple(Probe.from_dict(p) for p in doc["probes"])})
