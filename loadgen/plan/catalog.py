"""Every setting with its default, unit and meaning, for `loadgen settings`.

The meaning is each field's doc in `TestSettings`; the unit is read from the name's
suffix (units live in the names), so a new setting shows without editing this file.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from loadgen.plan.settings import SCENARIO_DEFAULTS, Scenario, TestSettings

__all__ = ["SettingDoc", "catalog", "unit_of"]

_SUFFIX_UNITS = (("_ms", "ms"), ("_s", "s"), ("_percentile", "%"), ("_qps", "queries/s"), ("_hz", "Hz"),
                 ("_count", "count"), ("_tokens", "tokens"), ("_seed", "seed"))


@dataclass(frozen=True, slots=True)
class SettingDoc:
    """One row of `loadgen settings`."""

    key: str
    default: str
    unit: str
    meaning: str


def unit_of(key: str) -> str:
    """The unit a setting's name carries ('' when it has none: a word, a flag, a count)."""
    for suffix, unit in _SUFFIX_UNITS:
        if key.endswith(suffix):
            return unit
    return ""


def _shown(value: object) -> str:
    if value is None or value == "" or value == ():
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    as_dict = getattr(value, "as_dict", None)
    return str(as_dict() if callable(as_dict) else value)


def catalog(settings: TestSettings | None = None) -> list[SettingDoc]:
    """Every key of TestSettings: its value in `settings` (default: the bare Server defaults)."""
    base = settings or TestSettings(**SCENARIO_DEFAULTS[Scenario.SERVER])
    return [SettingDoc(f.name, _shown(getattr(base, f.name)), unit_of(f.name),
                       str(f.metadata.get("doc", "")))
            for f in dataclasses.fields(TestSettings)]
