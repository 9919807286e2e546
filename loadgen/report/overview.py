"""The table a sweep or find-peak prints and its report.html leads with: one row per point
(sweep) or probe (find-peak), from the rows their documents carry (`report.rows`)."""

from __future__ import annotations

from loadgen.report.headline import conditions, slo_phrase
from loadgen.report.peakdoc import PeakDocument
from loadgen.report.rows import render_table
from loadgen.report.sweepdoc import SweepDocument

__all__ = ["peak_table", "sweep_conditions", "sweep_table"]


def sweep_conditions(doc: SweepDocument) -> str:
    """What every point shares: SLO, scenario, SUT (first point's), duration x launches."""
    point = doc.points[0]
    settings = point.settings
    scenario = str(settings["scenario"])
    parts = conditions(scenario, settings, point.sut_description, float(point.duration_s),
                       int(doc.launches))
    slo = slo_phrase(settings) if scenario == "Server" else ""
    return "; ".join(([slo] if slo else []) + parts)


def sweep_table(doc: SweepDocument) -> str:
    """One line per sweep point: its swept values, then its row (medians over launches)."""
    keys = list(doc.grid)
    rows = [{**point.row, **{k: point.values.get(k, "") for k in keys}}
            for point in doc.points]
    return render_table(rows, keys)


def peak_table(doc: PeakDocument) -> str:
    """One line per find-peak probe, in the order run: rate asked, trial, then its row; a
    harness-limited probe says so beside its verdict."""
    rows = []
    for probe in doc.probes:
        row = dict(probe.row)
        row |= {"target_qps": f"{probe.target_qps:g}", "trial": str(probe.trial)}
        if probe.harness_limited:
            row["reasons"] = f"{row.get('reasons', '')} (harness-limited)".strip()
        row.setdefault("valid", probe.valid)
        rows.append(row)
    return render_table(rows, ["target_qps", "trial"])
