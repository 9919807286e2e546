"""The one way a duration reads for people: `format_duration(ns)`.

Nanoseconds stay inside and in machine-readable files (result.json, CSV); every human
surface (summary, live line, compare, report tables, headlines) goes through here, so a
latency reads `2.71 ms`, `845 us` or `8.9 s`, never `2.70746e+06` or `1.41e+03 ms`.
"""

from __future__ import annotations

import math

__all__ = ["format_duration"]

_UNITS = ((1e9, "s"), (1e6, "ms"), (1e3, "us"))


def format_duration(ns: float, digits: int = 3) -> str:
    """`ns` in the largest unit that keeps it at least 1 (s, ms, us, ns), at most `digits`
    significant figures, no exponent, no trailing zeros: '2.71 ms', '61 ms', '1.41 s'."""
    if math.isnan(ns):
        return "-"
    ns = float(f"{ns:.{digits}g}")  # round first, so 999.96 ms reads 1.00 s
    magnitude = abs(ns)
    for scale, unit in _UNITS:
        if magnitude >= scale:
            return f"{_significant(ns / scale, digits)} {unit}"
    return f"{_significant(ns, digits)} ns"


def _significant(value: float, digits: int) -> str:
    """`value` to `digits` significant figures, in plain notation."""
    if value == 0:
        return "0"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value))))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
