"""Whether the host gave a timing-sensitive run a fair chance, judged from the run's own
measurements (its verdict and `environment.host_load`), and the skip that says why not."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from loadgen.record.hostload import HostLoad, HostSample, host_load, sample_host

__all__ = ["skip_if_busy_since", "skip_if_host_busy", "skip_if_host_unfair", "unfair_reason"]

HOST_SPEED_CODES = frozenset({"issue_lag", "early_stopping"})
"""Reasons a run can be INVALID for the host's speed alone: the issuer fell behind its
schedule, or the latency tail grew past the SLO."""


def unfair_reason(doc: Mapping[str, Any]) -> str | None:
    """Why the host could not give the run of result document `doc` a fair chance, in
    measured figures; None when it could (or when the run failed for another reason)."""
    codes = set(doc.get("reason_codes") or ())
    reasons = "; ".join(doc.get("reasons") or ())
    if "issue_lag" in codes:
        return f"the harness fell behind its schedule: {reasons}"
    load = (doc.get("environment") or {}).get("host_load")
    if load is None or not codes or not codes <= HOST_SPEED_CODES:
        return None
    host = HostLoad.from_dict(load)
    return f"busy host ({host.phrase()}): {reasons}" if host.busy else None


def skip_if_host_unfair(doc: Mapping[str, Any]) -> None:
    """Skip the calling test, with the measured reason, when `unfair_reason` finds one."""
    why = unfair_reason(doc)
    if why is not None:
        pytest.skip(f"the host could not give this run a fair chance: {why}")


def skip_if_host_busy(doc: Mapping[str, Any], failed: str) -> None:
    """Skip the calling test, saying what `failed` and the host's measured load, when the host
    was busy over the run of result document `doc` (`environment.host_load.busy`)."""
    load = (doc.get("environment") or {}).get("host_load")
    if load is not None and HostLoad.from_dict(load).busy:
        pytest.skip(f"the host was too busy for a fair run ({HostLoad.from_dict(load).phrase()}):"
                    f" {failed}")


def skip_if_busy_since(start: HostSample | None, failed: str) -> None:
    """Skip as `skip_if_host_busy` does, judging the host's load from `start` (a
    `sample_host()` the test took before its timed part) until now."""
    load = host_load(start, sample_host())
    skip_if_host_busy({"environment": {} if load is None else {"host_load": load.as_dict()}},
                      failed)
