"""Compare two measurements, per metric, with 95% confidence intervals of B - A.

A side is a run directory, a result.json, or a sweep point directory (its
launch-*/result.json). The interval of the difference comes from:

- `welch`: both sides have 2+ launches: Welch's t interval on the launch means.
- `order-statistic` (latency percentiles, otherwise): each side's histograms are
  merged; the percentile's interval is the values at the binomial ranks
  n*q -/+ 1.96*sqrt(n*q*(1-q)); B - A spans [B_low - A_high, B_high - A_low].
  Queueing latencies are correlated, so this understates the noise: launches are better.
- `poisson` (rates, otherwise): count / duration with the count's Poisson interval.

A difference whose interval holds 0 is inside the noise. The construct check flattens
`settings`, `sut`, `seeds`, `environment.packages` and the device/python/commit of the
environment on each side and lists every key whose values differ. More than one
differing key (or any key outside `--vary` prefixes, when given) is a construct
mismatch: the two differ in more than the variable being compared. Endpoints that say
different things of themselves (`endpoint.identity`, `endpoint.gpu`, with `endpoint_probe`)
are a mismatch on their own, unless `--vary endpoint`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from loadgen.campaigns.sweep import metric_values
from loadgen.errors import ResultError
from loadgen.plan.units import format_duration
from loadgen.record.histograms import decode, merge, percentile_ns
from loadgen.report.result import RunResult, read_result

__all__ = ["COMPARE_FILE", "Comparison", "MetricDiff", "Side", "compare", "comparison_doc",
           "construct_differences", "invalid_codes", "load_side", "render", "side_paths",
           "t_quantile", "token_metric_values"]

COMPARE_FILE = "compare.json"

Z95 = 1.959963984540054
_PERCENTILES = {"latency_p50_ns": 50.0, "latency_p90_ns": 90.0, "latency_p99_ns": 99.0}
_RATES = ("qps_scheduled", "qps_completed", "goodput_qps", "samples_per_s")
_ENV_KEYS = ("python", "cpu", "cpu_count", "gpus", "git_commit")
_IGNORED = ("sut.cold_start", "settings.compliant")


@dataclass(frozen=True, slots=True)
class Side:
    """One side of a comparison: its label and the results of its launches."""

    label: str
    results: tuple[RunResult, ...]


@dataclass(frozen=True, slots=True)
class MetricDiff:
    """B - A for one metric, its 95% interval and whether that interval holds 0."""

    metric: str
    a: float
    b: float
    diff: float
    low: float
    high: float
    method: str

    @property
    def noise(self) -> bool:
        """Whether the difference is inside the noise (the interval holds 0)."""
        return self.low <= 0 <= self.high

    @property
    def rel(self) -> float | None:
        """B / A - 1, or None when A is 0."""
        return self.diff / self.a if self.a else None


@dataclass(frozen=True, slots=True)
class Comparison:
    """Every metric's difference, the construct differences and the verdict on them."""

    a: Side
    b: Side
    metrics: tuple[MetricDiff, ...]
    differences: tuple[tuple[str, str, str], ...]
    mismatch: bool


def side_paths(path: Path) -> list[Path]:
    """The result files of a run dir, a result.json or a sweep point dir (launch-*/)."""
    if path.is_dir() and not (path / "result.json").is_file():
        runs = sorted(path.glob("launch-*/result.json"),
                      key=lambda p: int(p.parent.name.split("-")[1]))
        if not runs:
            raise ResultError(f"{path}: no result.json and no launch-*/result.json")
        return runs
    return [path]


def load_side(path: Path) -> Side:
    """Read a run dir, a result.json or a sweep point dir (launch-*/result.json)."""
    return Side(str(path), tuple(read_result(p) for p in side_paths(path)))


def comparison_doc(c: Comparison) -> dict[str, Any]:
    """The comparison as plain JSON (what `compare --json` prints and compare.json holds)."""
    return {"a": c.a.label, "b": c.b.label, "mismatch": c.mismatch,
            "invalid": {"a": invalid_codes(c.a), "b": invalid_codes(c.b)},
            "differences": [list(d) for d in c.differences],
            "metrics": [asdict(m) | {"noise": m.noise, "rel": m.rel} for m in c.metrics]}


def t_quantile(q: float, df: float) -> float:
    """Student's t quantile (q > 0.5), by bisection on the CDF integrated numerically."""
    def cdf(x: float) -> float:
        steps = 2000
        h = x / steps
        c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
        ys = [c * float((1 + (i * h) ** 2 / df) ** (-(df + 1) / 2)) for i in range(steps + 1)]
        return 0.5 + h * (sum(ys) - (ys[0] + ys[-1]) / 2)

    lo, hi = 0.0, 1000.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return (lo + hi) / 2


def _welch(name: str, xa: Sequence[float], xb: Sequence[float]) -> MetricDiff:
    ma, mb = statistics.fmean(xa), statistics.fmean(xb)
    va, vb = statistics.variance(xa) / len(xa), statistics.variance(xb) / len(xb)
    se = math.sqrt(va + vb)
    if se == 0:
        return MetricDiff(name, ma, mb, mb - ma, mb - ma, mb - ma, "welch")
    df = (va + vb) ** 2 / (va**2 / (len(xa) - 1) + vb**2 / (len(xb) - 1))
    half = t_quantile(0.975, df) * se
    return MetricDiff(name, ma, mb, mb - ma, mb - ma - half, mb - ma + half, "welch")


def _percentile_interval(blobs: Sequence[str], q: float) -> tuple[float, ...]:
    hist = merge(decode(b) for b in blobs)
    n = int(hist.get_total_count())
    spread = Z95 * math.sqrt(n * q * (1 - q))
    ranks = (max(n * q - spread, 1.0), min(n * q + spread + 1, float(n)))
    return (float(percentile_ns(hist, 100 * q)),
            *(float(percentile_ns(hist, 100 * r / n)) for r in ranks))


def _rate_interval(results: Sequence[RunResult], metric: str) -> tuple[float, float]:
    duration = sum(r.stats.duration_s for r in results)
    count = sum(float(getattr(r.stats, metric)) * r.stats.duration_s for r in results)
    return count / duration, Z95 * math.sqrt(count) / duration


def _single(name: str, a: Side, b: Side) -> MetricDiff:
    if name in _PERCENTILES and all("query_latency_ns" in r.stats.histograms
                                    for r in (*a.results, *b.results)):
        q = _PERCENTILES[name] / 100
        va, a_lo, a_hi = _percentile_interval(
            [r.stats.histograms["query_latency_ns"] for r in a.results], q)
        vb, b_lo, b_hi = _percentile_interval(
            [r.stats.histograms["query_latency_ns"] for r in b.results], q)
        return MetricDiff(name, va, vb, vb - va, b_lo - a_hi, b_hi - a_lo, "order-statistic")
    if name in _RATES:
        (va, ha), (vb, hb) = _rate_interval(a.results, name), _rate_interval(b.results, name)
        half = math.hypot(ha, hb)
        return MetricDiff(name, va, vb, vb - va, vb - va - half, vb - va + half, "poisson")
    va = statistics.median(metric_values(r)[name] for r in a.results)
    vb = statistics.median(metric_values(r)[name] for r in b.results)
    return MetricDiff(name, va, vb, vb - va, vb - va, vb - va, "none")


def _flatten(prefix: str, value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key, sub in value.items():
            yield from _flatten(f"{prefix}.{key}", sub)
    else:
        yield prefix, value


def _construct(result: RunResult) -> dict[str, Any]:
    env = result.environment
    settings = result.settings.as_dict()
    parts = {"settings": {k: v for k, v in settings.items() if not k.endswith("_rng_seed")},
             "sut": result.sut,
             "seeds": {k.removesuffix("_rng_seed"): v for k, v in settings.items()
                       if k.endswith("_rng_seed")},
             "environment": {"packages": env.get("packages", {}),
                             **{k: env.get(k) for k in _ENV_KEYS}}}
    if result.endpoint is not None:  # what it said of itself, not where it was nor its RTT
        parts["endpoint"] = {"identity": result.endpoint.get("identity"),
                             "gpu": result.endpoint.get("gpu")}
    flat: dict[str, Any] = {}
    for name, value in parts.items():
        flat |= dict(_flatten(name, value))
    return {k: v for k, v in flat.items() if not k.startswith(_IGNORED)}


def construct_differences(a: Side, b: Side) -> list[tuple[str, str, str]]:
    """(key, A's values, B's values) for every construct key on which the sides differ."""
    flat_a = [_construct(r) for r in a.results]
    flat_b = [_construct(r) for r in b.results]
    out = []
    for key in sorted(set().union(*flat_a, *flat_b)):
        va = sorted({repr(f.get(key)) for f in flat_a})
        vb = sorted({repr(f.get(key)) for f in flat_b})
        if va != vb:
            out.append((key, " ".join(va), " ".join(vb)))
    return out


def compare(a: Side, b: Side, vary: Sequence[str] = ()) -> Comparison:
    """Every metric's difference and the construct check."""
    launches = len(a.results) > 1 and len(b.results) > 1
    metrics = []
    for name in (n for n in metric_values(a.results[0]) if n != "headline"):
        if launches:
            xa = [metric_values(r)[name] for r in a.results]
            xb = [metric_values(r)[name] for r in b.results]
            metrics.append(_welch(name, xa, xb))
        else:
            metrics.append(_single(name, a, b))
    if all(r.stats.token_stats is not None for r in (*a.results, *b.results)):
        metrics += _token_metrics(a, b, launches)
    diffs = construct_differences(a, b)
    if vary:
        mismatch = any(not any(k == v or k.startswith(v + ".") for v in vary) for k, _, _ in diffs)
    else:
        mismatch = len(diffs) > 1
    told = any(v == "endpoint" or v.startswith("endpoint.") for v in vary)
    mismatch |= not told and any(k.startswith("endpoint.") for k, _, _ in diffs)
    return Comparison(a, b, tuple(metrics), tuple(diffs), mismatch)


_TOKEN_PERCENTILES = {"ttft_p50_ns": ("ttft_ns", 0.5), "ttft_p99_ns": ("ttft_ns", 0.99),
                      "tpot_p50_ns": ("tpot_ns", 0.5), "tpot_p99_ns": ("tpot_ns", 0.99),
                      "itl_p99_ns": ("itl_ns", 0.99), "e2e_p99_ns": ("e2e_ns", 0.99)}
_TOKEN_RATES: dict[str, Callable[[Any], float]] = {"output_tokens_per_s": lambda ts: ts.tokens.output_per_s,
                "goodput_tokens_per_s": lambda ts: ts.goodput.tokens_per_s}


def token_metric_values(result: RunResult) -> dict[str, float]:
    """A token run's figures compared (empty for a run without token streams)."""
    ts = result.stats.token_stats
    if ts is None:
        return {}
    out = {name: float(ts.latencies[key].summary.quantile(q))
           for name, (key, q) in _TOKEN_PERCENTILES.items()}
    out |= {name: float(get(ts)) for name, get in _TOKEN_RATES.items()}
    out["attainment"] = ts.goodput.attainment
    return out


def _token_metrics(a: Side, b: Side, launches: bool) -> list[MetricDiff]:
    """Token figures: Welch over launches, else order statistics (latencies) and Poisson
    counts (token rates); attainment without an interval."""
    values_a = [token_metric_values(r) for r in a.results]
    values_b = [token_metric_values(r) for r in b.results]
    out = []
    for name in values_a[0]:
        xa, xb = [v[name] for v in values_a], [v[name] for v in values_b]
        if launches:
            out.append(_welch(name, xa, xb))
        elif name in _TOKEN_PERCENTILES:
            key, q = _TOKEN_PERCENTILES[name]
            blobs_a = [_token_blob(r, key) for r in a.results]
            blobs_b = [_token_blob(r, key) for r in b.results]
            if not all([*blobs_a, *blobs_b]):  # a result written without them
                out.append(MetricDiff(name, xa[0], xb[0], xb[0] - xa[0], xb[0] - xa[0],
                                      xb[0] - xa[0], "none"))
                continue
            va, a_lo, a_hi = _percentile_interval([x for x in blobs_a if x], q)
            vb, b_lo, b_hi = _percentile_interval([x for x in blobs_b if x], q)
            out.append(MetricDiff(name, va, vb, vb - va, b_lo - a_hi, b_hi - a_lo,
                                  "order-statistic"))
        elif name in _TOKEN_RATES:
            (va, ha), (vb, hb) = (_count_rate(s.results, xs) for s, xs in ((a, xa), (b, xb)))
            half = math.hypot(ha, hb)
            out.append(MetricDiff(name, va, vb, vb - va, vb - va - half, vb - va + half,
                                  "poisson"))
        else:
            va, vb = statistics.median(xa), statistics.median(xb)
            out.append(MetricDiff(name, va, vb, vb - va, vb - va, vb - va, "none"))
    return out


def _token_blob(result: RunResult, key: str) -> str | None:
    ts = result.stats.token_stats
    return None if ts is None else ts.histograms.get(key)


def _count_rate(results: Sequence[RunResult], rates: Sequence[float]) -> tuple[float, float]:
    """A rate over launches and its Poisson half-width, from per-launch rates."""
    duration = sum(r.stats.duration_s for r in results)
    count = sum(rate * r.stats.duration_s for rate, r in zip(rates, results, strict=True))
    return (count / duration, Z95 * math.sqrt(count) / duration) if duration else (0.0, 0.0)


def _fmt(name: str, value: float) -> str:
    return format_duration(value, 4) if name.endswith("_ns") else f"{value:.5g}"


def invalid_codes(side: Side) -> list[str]:
    """The reason codes of a side's INVALID launches (empty when every launch is VALID)."""
    return sorted({str(code) for r in side.results if not r.valid for code in r.verdict.codes})


def _validity(side: Side) -> str:
    bad = sum(not r.valid for r in side.results)
    if not bad:
        return "VALID"
    return f"INVALID ({bad} of {len(side.results)}: {', '.join(invalid_codes(side)) or '?'})"


def render(c: Comparison) -> str:
    """The comparison as text: each side's validity, one line per metric (no direction
    claimed between INVALID runs), then the construct check."""
    invalid = [name for name, side in (("A", c.a), ("B", c.b)) if invalid_codes(side)]
    lines = [f"A: {c.a.label} ({len(c.a.results)} launch(es)) {_validity(c.a)}",
             f"B: {c.b.label} ({len(c.b.results)} launch(es)) {_validity(c.b)}", "",
             (f"{'metric':<16}{'A':>12}{'B':>12}{'B-A':>14}{'rel':>8}  "
             f"{'95% CI of B-A':<30}{'method':<16}verdict")]
    for m in c.metrics:
        rel = f"{m.rel:+.1%}" if m.rel is not None else "-"
        verdict = "inside noise" if m.noise else ("B higher" if m.diff > 0 else "B lower")
        if m.method == "none":
            verdict = "no interval"
        elif invalid and not m.noise:
            verdict = f"{verdict}? ({' and '.join(invalid)} INVALID)"
        ci = f"[{_fmt(m.metric, m.low)}, {_fmt(m.metric, m.high)}]"
        lines.append(f"{m.metric.removesuffix('_ns'):<16}{_fmt(m.metric, m.a):>12}{_fmt(m.metric, m.b):>12}"
                     f"{_fmt(m.metric, m.diff):>14}{rel:>8}  {ci:<30}{m.method:<16}{verdict}")
    lines.append("")
    if not c.differences:
        lines.append("construct: A and B were run the same way")
    for key, va, vb in c.differences:
        lines.append(f"differs: {key}: {va} -> {vb}")
    if c.mismatch:
        lines.append(f"WARNING: construct mismatch: A and B differ in {len(c.differences)} "
                     "things, more than the variable being compared (name it with --vary)")
    if invalid:
        lines.append(f"WARNING: {' and '.join(invalid)} INVALID: a run that failed its rules "
                     "(see each summary.txt) does not say which is better; fix the reasons "
                     "and compare VALID runs")
    return "\n".join(lines) + "\n"
