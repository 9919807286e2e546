"""One histogram's summary as a typed record: percentiles, mean, extremes and count, in ns.

`LatencySummary` is the record every latency of result.json is written from (`latency_ns`,
`ttft_ns`, ...) and token counts per request too (`tokens.input`, `tokens.output`);
`as_dict` gives result.json's keys and `from_dict` reads them back.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.judge.adjusted import ADJUSTED_PERCENTILES, error_adjusted
from loadgen.record.histograms import summary_ns

__all__ = ["LatencySummary"]

_ADJUSTED = "_error_adjusted"
_QUANTILES = {0.5: "p50", 0.9: "p90", 0.95: "p95", 0.99: "p99", 0.999: "p999"}


@dataclass(frozen=True, slots=True)
class LatencySummary:
    """Percentiles, mean, extremes and count of one histogram, in ns (zeros when empty)."""

    p50: int = 0
    p90: int = 0
    p95: int = 0
    p99: int = 0
    p999: int = 0
    mean: int = 0
    min: int = 0
    max: int = 0
    count: int = 0
    error_adjusted: dict[str, int | None] | None = None
    """`p50`, `p90`, `p99` (and the SLO's percentile) with failed and unfinished queries
    counted as infinite (None) or at the query timeout (`judge.adjusted`); written as
    `p99_error_adjusted` and so on beside the finished-only ones."""

    @classmethod
    def of(cls, hist: HdrHistogram, failed: int | None = None,
           percentiles: tuple[float, ...] = ADJUSTED_PERCENTILES,
           cap_ns: int | None = None) -> LatencySummary:
        """The summary of a histogram; with `failed`, its error-adjusted percentiles too."""
        adjusted = None if failed is None else error_adjusted(hist, failed, percentiles, cap_ns)
        return cls(**summary_ns(hist), error_adjusted=adjusted)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> LatencySummary:
        """Read back `as_dict` (keys it does not know are ignored)."""
        adjusted = {k.removesuffix(_ADJUSTED): v for k, v in doc.items()
                    if k.endswith(_ADJUSTED)}
        return cls(**{f.name: int(doc.get(f.name, 0)) for f in dataclasses.fields(cls)
                      if f.name != "error_adjusted"}, error_adjusted=adjusted or None)

    def as_dict(self) -> dict[str, Any]:
        """Plain values, keyed as in result.json."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                               if f.name != "error_adjusted"}
        for key, value in (self.error_adjusted or {}).items():
            out[f"{key}{_ADJUSTED}"] = value
        return out

    def quantile(self, q: float) -> int:
        """The figure at quantile `q` (0.5, 0.9, 0.95, 0.99 or 0.999)."""
        name = _QUANTILES.get(q)
        if name is None:
            raise ValueError(f"no summary figure at quantile {q}: one of {sorted(_QUANTILES)}")
        value: int = getattr(self, name)
        return value
