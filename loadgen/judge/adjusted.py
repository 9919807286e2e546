"""Error-adjusted percentiles: the tail with failed and unfinished requests counted in.

A finished-only percentile hides failures: 1,000 answers and 20 errors have the same p99 as
the 1,000 answers alone. Here each failed or unfinished request counts as an infinitely slow
one (or as `cap_ns`, its timeout, where one bounds it): with n finished and f failed, the
p-th percentile of all n + f is the finished ones' value at rank p (n + f) / 100, and past
the n-th rank it is the cap, or None for infinite. Pure; the keys are the summary's (`p50`,
`p90`, `p99`, `p999`).
"""

from __future__ import annotations

from collections.abc import Iterable

from hdrh.histogram import HdrHistogram  # type: ignore[import-untyped]

from loadgen.record.histograms import percentile_ns

__all__ = ["ADJUSTED_PERCENTILES", "adjusted_percentiles", "error_adjusted", "percentile_key"]

ADJUSTED_PERCENTILES = (50.0, 90.0, 99.0)


def adjusted_percentiles(target: float) -> tuple[float, ...]:
    """p50, p90, p99 and the SLO's percentile `target`."""
    return ADJUSTED_PERCENTILES if target in ADJUSTED_PERCENTILES \
        else (*ADJUSTED_PERCENTILES, target)


def percentile_key(p: float) -> str:
    """`p50`, `p99`, `p999` (99.9) for a percentile, as the summaries name them."""
    return f"p{p:g}".replace(".", "")


def error_adjusted(hist: HdrHistogram, failed: int, percentiles: Iterable[float],
                   cap_ns: int | None = None) -> dict[str, int | None]:
    """Each percentile over the finished values of `hist` and `failed` more at infinity (or
    at `cap_ns`); None means infinite."""
    finished = int(hist.total_count)
    total = finished + max(0, failed)
    out: dict[str, int | None] = {}
    for p in percentiles:
        rank = p / 100 * total
        if total == 0:
            out[percentile_key(p)] = 0
        elif finished and rank <= finished:
            out[percentile_key(p)] = percentile_ns(hist, min(100.0, 100 * rank / finished))
        else:
            out[percentile_key(p)] = cap_ns
    return out
