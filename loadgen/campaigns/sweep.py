"""Sweeps: a grid of settings and SUT knobs, N independent launches per point, median and spread.

Grid syntax (`--grid` repeated gives the cartesian product, first axis slowest):

    KEY=v1,v2,...       a TestSettings key; each value is a TOML literal, as with --set
    KEY=a:b:step        an inclusive numeric range: target_qps=500:2000:500 -> 500 1000 1500 2000
    sut.KEY=v1,v2,...   a SUT option: sets KEY=value in the --sut spec, replacing or appending it
                        (builtin:mlp,max_batch_size=8 with sut.max_batch_size=1,32 runs
                        builtin:mlp,max_batch_size=1 and builtin:mlp,max_batch_size=32);
                        values are kept as written, and a:b:step works here too
    batcher.KEY=1,2,... an integer batcher knob of a remote `loadgen serve` (an http[s]://
                        SUT), retuned live before each point's launches and put back as it
                        was when the sweep ends (loadgen.adapters.batcher_knobs)

Each launch is its own `run_test` call with a fresh SUT built from the spec (for a
builtin SUT, a new service). Launch k shifts the schedule and sample-index seeds by
k, so launches are independent draws, and launch k of every point shares its seeds.
Per point and metric: median, min, max and CV (sample std / mean); a point whose CV
exceeds `NOISY_CV` on any metric is flagged noisy. Never best-of-N.

Layout: DIR/sweep.json, DIR/sweep.csv, DIR/points/NNN-VALUES/launch-K/ holding
result.json, summary.txt and launch.json (what was run). Re-running the same sweep
reuses every launch whose launch.json matches.
"""

from __future__ import annotations

import itertools
import math
import re
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from loadgen.campaigns.launch import Launcher, launch, plain, run_cached, seeded, vary
from loadgen.errors import ResultError, SettingsError, SutSpecError
from loadgen.plan.settings import TestSettings, parse_overrides
from loadgen.report.result import RunResult
from loadgen.report.rows import point_row, run_row
from loadgen.report.sweepdoc import MetricSpread, SweepDocument, SweepPoint

__all__ = [
    "METRICS",
    "NOISY_CV",
    "Aggregate",
    "Axis",
    "aggregate",
    "metric_values",
    "parse_axis",
    "run_sweep",
    "set_sut_option",
    "spread",
]

NOISY_CV = 0.05
SUT_PREFIX = "sut."
BATCHER_PREFIX = "batcher."

Retuner = Callable[[str, Mapping[str, Any] | None], dict[str, Any]]
"""(spec, knobs to set or None) -> the remote batcher knobs in force."""

METRICS: dict[str, Callable[[RunResult], float]] = {
    "qps_scheduled": lambda r: r.stats.qps_scheduled,
    "qps_completed": lambda r: r.stats.qps_completed,
    "goodput_qps": lambda r: r.stats.goodput_qps,
    "samples_per_s": lambda r: r.stats.samples_per_s,
    "latency_p50_ns": lambda r: float(r.stats.query_latency_ns.p50),
    "latency_p90_ns": lambda r: float(r.stats.query_latency_ns.p90),
    "latency_p99_ns": lambda r: float(r.stats.query_latency_ns.p99),
    "headline": lambda r: r.headline.value,
}

_RANGE = re.compile(r"^\s*(-?[0-9.eE+-]+)\s*:\s*(-?[0-9.eE+-]+)\s*:\s*([0-9.eE+-]+)\s*$")


@dataclass(frozen=True, slots=True)
class Axis:
    """One grid axis: a settings key, `sut.KEY` or `batcher.KEY`, and its values in order."""

    key: str
    values: tuple[Any, ...]

    @property
    def is_sut(self) -> bool:
        """Whether the axis rewrites the SUT spec rather than a setting."""
        return self.key.startswith(SUT_PREFIX)

    @property
    def is_batcher(self) -> bool:
        """Whether the axis retunes a remote server's batcher rather than a setting."""
        return self.key.startswith(BATCHER_PREFIX)


def _range(text: str) -> list[float | int] | None:
    match = _RANGE.match(text)
    if not match:
        return None
    try:
        start, stop, step = (float(g) for g in match.groups())
    except ValueError:
        return None
    if step <= 0 or stop < start:
        raise SettingsError([f"--grid range {text!r}: needs start <= stop and a positive step"])
    count = math.floor((stop - start) / step + 1e-9) + 1
    if count > 1000:
        raise SettingsError([f"--grid range {text!r}: {count} values, at most 1000"])
    values = [start + i * step for i in range(count)]
    if all(v == int(v) for v in (start, step)):
        return [int(v) for v in values]
    return [round(v, 12) for v in values]


def parse_axis(text: str) -> Axis:
    """'target_qps=100,200' / 'target_qps=100:400:100' / 'sut.max_batch_size=1,8' -> Axis."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not raw.strip():
        raise SettingsError([f"--grid {text!r}: expected KEY=v1,v2,... or KEY=start:stop:step"])
    numbers = _range(raw)
    if key.startswith(BATCHER_PREFIX):
        return Axis(key, _integers(text, key, raw, numbers))
    if key.startswith(SUT_PREFIX):
        if len(key) == len(SUT_PREFIX):
            raise SettingsError([f"--grid {text!r}: name the SUT option after 'sut.'"])
        items = [f"{v:g}" for v in numbers] if numbers is not None else raw.split(",")
        return Axis(key, tuple(v.strip() for v in items if v.strip()))
    if numbers is not None:
        return Axis(key, tuple(numbers))
    values = [parse_overrides([f"{key}={item}"])[key] for item in raw.split(",") if item.strip()]
    return Axis(key, tuple(values))


def _integers(text: str, key: str, raw: str, numbers: list[float | int] | None
              ) -> tuple[int, ...]:
    """A batcher axis's values: integers, listed or as a range."""
    if len(key) == len(BATCHER_PREFIX):
        raise SettingsError([f"--grid {text!r}: name the batcher knob after 'batcher.'"])
    items = [str(n) for n in numbers] if numbers is not None else \
        [item.strip() for item in raw.split(",") if item.strip()]
    if not all(item.lstrip("-").isdigit() for item in items):
        raise SettingsError([f"--grid {text!r}: batcher knobs take integers"])
    return tuple(int(item) for item in items)


def set_sut_option(spec: str, key: str, value: str) -> str:
    """The spec with option `key` set to `value` (replaced in place, or appended)."""
    kind, sep, rest = spec.partition(":")
    if not sep:
        raise SutSpecError(f"--grid {SUT_PREFIX}{key}: the SUT {spec!r} takes no options")
    parts = [p.strip() for p in rest.split(",") if p.strip()]
    found = False
    for i, part in enumerate(parts):
        name, eq, _ = part.partition("=")
        if eq and name.strip() == key:
            parts[i], found = f"{key}={value}", True
    if not found:
        parts.append(f"{key}={value}")
    return f"{kind}:{','.join(parts)}"


def metric_values(result: RunResult) -> dict[str, float]:
    """The figures a sweep aggregates, read from one result."""
    return {name: get(result) for name, get in METRICS.items()}


def spread(values: Sequence[float]) -> MetricSpread:
    """Median, min, max, CV (sample std / mean; None with one value) and n."""
    n = len(values)
    mean = statistics.fmean(values)
    cv: float | None = None
    if n > 1:
        cv = statistics.stdev(values) / abs(mean) if mean else 0.0
    return MetricSpread(statistics.median(values), min(values), max(values), cv, n)


@dataclass(frozen=True, slots=True)
class Aggregate:
    """A point's launches summed up: each metric's spread, the noisy ones, how many VALID."""

    stats: dict[str, MetricSpread]
    noisy_metrics: tuple[str, ...]
    valid_launches: int
    duration_s: float  # median over launches

    @property
    def noisy(self) -> bool:
        """Whether any metric's CV exceeds `NOISY_CV`."""
        return bool(self.noisy_metrics)


def aggregate(results: Sequence[RunResult]) -> Aggregate:
    """Median and spread of every metric over launches, plus the noisy flag."""
    per_launch = [metric_values(r) for r in results]
    stats = {name: spread([v[name] for v in per_launch]) for name in METRICS}
    noisy = tuple(name for name, s in stats.items() if s.cv is not None and s.cv > NOISY_CV)
    return Aggregate(stats, noisy, sum(r.valid for r in results),
                     statistics.median(r.stats.duration_s for r in results))


@dataclass(frozen=True, slots=True)
class _Point:
    values: dict[str, Any]  # axis key -> value
    settings: TestSettings
    spec: str
    knobs: dict[str, int]  # remote batcher knobs; empty without batcher axes


def _run_point(index: int, p: _Point, launches: int, out_dir: Path, runner: Launcher,
               log: Callable[[str], None] | None, retune: Retuner) -> SweepPoint:
    """Run one grid point's launches (retuning the server first); its sweep entry."""
    in_force = retune(p.spec, p.knobs) if p.knobs else {}
    point_dir = Path("points") / _dir_name(index, p.values)
    results, dirs = [], []
    for k in range(launches):
        run_dir = point_dir / f"launch-{k}"
        result, reused = run_cached(seeded(p.settings, k), p.spec, out_dir / run_dir, runner,
                                    p.knobs)
        results.append(result)
        dirs.append(str(run_dir))
        if log:
            log(f"point {index} {p.values} launch {k}: {'reused' if reused else 'ran'}, "
                f"{'VALID' if result.valid else 'INVALID'}")
    agg = aggregate(results)
    return SweepPoint(index=index, values=p.values, sut=p.spec, dir=str(point_dir),
                      launch_dirs=tuple(dirs), settings=plain(p.settings.as_dict()),
                      sut_description=results[0].sut,
                      row=point_row([run_row(r) for r in results]), stats=agg.stats,
                      noisy=agg.noisy, noisy_metrics=agg.noisy_metrics,
                      valid_launches=agg.valid_launches, duration_s=agg.duration_s,
                      batcher=in_force or None)


def _dir_name(index: int, values: Mapping[str, Any]) -> str:
    text = ",".join(f"{k}={v}" for k, v in values.items())
    return f"{index:03d}-" + re.sub(r"[^A-Za-z0-9._=,+-]", "_", text)[:80]


def _points(settings: TestSettings, spec: str, axes: Sequence[Axis]) -> list[_Point]:
    points = []
    problems: list[str] = []
    for combo in itertools.product(*(a.values for a in axes)):
        values = {a.key: v for a, v in zip(axes, combo, strict=True)}
        point_spec, knobs = spec, {}
        for axis, value in zip(axes, combo, strict=True):
            if axis.is_sut:
                point_spec = set_sut_option(point_spec, axis.key[len(SUT_PREFIX):], str(value))
            elif axis.is_batcher:
                knobs[axis.key[len(BATCHER_PREFIX):]] = value
        try:
            point = vary(settings, {a.key: v for a, v in zip(axes, combo, strict=True)
                                    if not (a.is_sut or a.is_batcher)})
        except SettingsError as exc:
            problems += [f"grid point {values}: {p}" for p in exc.problems]
            continue
        points.append(_Point(values, point, point_spec, knobs))
    if problems:
        raise SettingsError(problems)
    return points


def _remote_batcher(spec: str, knobs: Mapping[str, Any] | None) -> dict[str, Any]:
    from loadgen.adapters.batcher_knobs import batcher_knobs

    return batcher_knobs(spec, knobs)


def _remote_knobs(spec: str, axes: Sequence[Axis], retune: Retuner) -> dict[str, Any]:
    """The knobs in force before the sweep, of those the batcher axes change; {} without any."""
    swept = [a.key[len(BATCHER_PREFIX):] for a in axes if a.is_batcher]
    if not swept:
        return {}
    if not spec.startswith(("http://", "https://")):
        problem = (f"--grid {BATCHER_PREFIX}*: retunes a remote `loadgen serve` over HTTP; "
                   f"--sut {spec!r} is not an http[s]:// spec (for builtin:, vary the spec "
                   f"with {SUT_PREFIX}KEY)")
        raise SettingsError([problem])
    before = retune(spec, None)
    unknown = sorted(set(swept) - set(before))
    if unknown:
        problem = (f"--grid {BATCHER_PREFIX}{unknown[0]}: the server has no such knob; it has "
                   f"{', '.join(sorted(before))}")
        raise SettingsError([problem])
    return {key: before[key] for key in swept}


def run_sweep(settings: TestSettings, spec: str, axes: Sequence[Axis], launches: int,
              out_dir: Path, runner: Launcher = launch,
              log: Callable[[str], None] | None = None,
              retune: Retuner = _remote_batcher) -> SweepDocument:
    """Run every grid point `launches` times; write and return the sweep document.

    With batcher axes, `retune` sets each point's knobs on the server before its
    launches, and the knobs it had are put back at the end.
    """
    from loadgen.report import headline, tables

    if launches < 1:
        raise SettingsError([f"--launches: must be at least 1, got {launches}"])
    began = time.perf_counter()
    grid = _points(settings, spec, axes)
    before = _remote_knobs(spec, axes, retune)
    points = []
    try:
        for index, p in enumerate(grid):
            points.append(_run_point(index, p, launches, out_dir, runner, log, retune))
    finally:
        if before:
            retune(spec, before)
    points = [replace(p, headline=headline.point_headline(p)) for p in points]
    if not points:
        raise ResultError("the grid has no points")
    doc = SweepDocument(sut=spec, scenario=str(settings.scenario),
                        grid={a.key: list(a.values) for a in axes}, launches=launches,
                        noisy_cv=NOISY_CV, metrics=tuple(METRICS), points=tuple(points),
                        elapsed_s=round(time.perf_counter() - began, 3))
    tables.write_json(out_dir / "sweep.json", doc.as_dict())
    tables.write_csv(out_dir / "sweep.csv", tables.sweep_rows(doc))
    return doc
