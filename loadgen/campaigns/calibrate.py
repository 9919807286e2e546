"""Self-calibration: how fast this harness can issue, per adapter kind, and a warning when a
run asks for more than it safely can.

`calibrate(spec)` finds the highest Poisson rate one load process keeps to its
schedule: short Server probes, doubling from `start_qps` until one fails, then
bisecting. A probe passes when the run is VALID under a loose SLO, so what
fails it is the issue lag (the harness fell behind), errors, or too few
completions. In-process adapters (`null`, `sim:`, `builtin:`) are measured on
the null SUT, which costs nothing, so the figure is the harness's own ceiling;
`http://` and `grpc://` specs are measured against the endpoint as given
(point them at an echo server to measure the client side alone).

Figures are kept in `$LOADGEN_CACHE_DIR/calibration.json` (default
`~/.cache/loadgen/`), keyed by adapter kind. Before a run, `headroom_warning`
compares the peak rate each load process must issue with `HEADROOM` of the
ceiling. A run whose issue lag shows the harness fell behind is INVALID
whatever the calibration said (`verdict.issue_lag`).
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import TestSettings, load_settings

__all__ = [
    "CACHE_ENV",
    "CACHE_FILE",
    "HEADROOM",
    "INPROCESS",
    "adapter_kind",
    "cache_path",
    "calibrate",
    "find_ceiling",
    "headroom_warning",
    "load_calibration",
    "save_calibration",
]

CACHE_ENV = "LOADGEN_CACHE_DIR"
CACHE_FILE = "calibration.json"
HEADROOM = 0.7
INPROCESS = "inprocess"
PROBE_SLO_MS = 1000.0

Probe = Callable[[float], tuple[bool, dict[str, Any]]]


def adapter_kind(spec: str) -> str:
    """`inprocess` for null/sim/builtin, `http` or `grpc` for remote specs, else the prefix."""
    scheme = spec.partition(":")[0].lower()
    if scheme in ("null", "sim", "builtin"):
        return INPROCESS
    return {"https": "http", "grpcs": "grpc"}.get(scheme, scheme)


def cache_path() -> Path:
    """Where calibration figures are kept."""
    root = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "loadgen"
    return Path(root) / CACHE_FILE


def load_calibration(path: Path | None = None) -> dict[str, Any]:
    """Every stored calibration, by adapter kind (empty if none or unreadable)."""
    try:
        doc = json.loads((path or cache_path()).read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def save_calibration(kind: str, entry: dict[str, Any], path: Path | None = None) -> Path:
    """Store one adapter kind's figures (other kinds are kept)."""
    path = path or cache_path()
    doc = load_calibration(path)
    doc[kind] = entry
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, path)
    return path


def find_ceiling(probe: Probe, start_qps: float, steps: int,
                 report: Callable[[float, bool, dict[str, Any]], None] | None = None,
                 ) -> tuple[float, dict[str, Any]]:
    """Highest passing rate: double from `start_qps` until a probe fails (or, if the first
    fails, halve until one passes, at most `steps` times), then bisect `steps` times.

    Returns (0, {}) if nothing passed.
    """
    lo, lo_figures, hi = 0.0, {}, start_qps

    def attempt(qps: float) -> bool:
        nonlocal lo, lo_figures
        ok, figures = probe(qps)
        if report is not None:
            report(qps, ok, figures)
        if ok:
            lo, lo_figures = qps, figures
        return ok

    while attempt(hi):
        hi *= 2
    for _ in range(steps if not lo else 0):
        if attempt(hi / 2):
            break
        hi /= 2
    for _ in range(steps if lo else 0):
        mid = (lo + hi) / 2
        if not attempt(mid):
            hi = mid
    return lo, lo_figures


def _probe_settings(qps: float, duration_s: float) -> TestSettings:
    return load_settings(None, [
        "preset='dev'", f"target_qps={qps}", f"target_latency_ms={PROBE_SLO_MS}",
        f"min_duration_s={duration_s}", "min_query_count=100", f"warmup_s={duration_s / 4}"])


def _probe_for(spec: str, duration_s: float) -> Probe:
    from loadgen.adapters.null import NullSut
    from loadgen.adapters.registry import make_sut
    from loadgen.api import run_async, run_loop

    inprocess = adapter_kind(spec) == INPROCESS

    def probe(qps: float) -> tuple[bool, dict[str, Any]]:
        sut = NullSut() if inprocess else make_sut(spec)
        r = run_loop(run_async(_probe_settings(qps, duration_s), sut))
        return r.valid, {"issue_lag_p99_ns": r.stats.issue_lag_ns.p99,
                         "latency_p99_ns": r.stats.latency_ns.p99, "errors": r.stats.errors}

    return probe


def calibrate(spec: str, duration_s: float = 1.0, steps: int = 4, start_qps: float = 5000.0,
              report: Callable[[float, bool, dict[str, Any]], None] | None = None,
              probe: Probe | None = None) -> dict[str, Any]:
    """Measure the ceiling for `spec`'s adapter kind; returns the entry to store."""
    ceiling, figures = find_ceiling(probe or _probe_for(spec, duration_s), start_qps, steps,
                                    report)
    kind = adapter_kind(spec)
    return {"ceiling_qps": ceiling, "spec": spec if kind != INPROCESS else "null",
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(),
            "cpus": os.cpu_count(), "probe_s": duration_s, **figures}


def headroom_warning(plan: RunPlan, spec: str) -> str | None:
    """A warning if each load process must issue above HEADROOM of the calibrated ceiling."""
    entry = load_calibration().get(adapter_kind(spec))
    if plan.arrival is None or not isinstance(entry, dict):
        return None
    ceiling = float(entry.get("ceiling_qps", 0.0))
    per_process = plan.arrival.peak_qps / plan.settings.workers
    if ceiling <= 0 or per_process <= HEADROOM * ceiling:
        return None
    return (f"the peak rate per load process, {per_process:.0f} QPS, is above "
            f"{HEADROOM:.0%} of this harness's calibrated ceiling {ceiling:.0f} QPS for "
            f"{adapter_kind(spec)} adapters (measured {entry.get('measured_at', '?')}): the "
            "issue lag may invalidate the run; add load processes (--workers) or lower the rate")
