"""One launch of a campaign: a fresh SUT from a spec, one run, reused when already done.

Sweeps and find-peak both run their launches through here: `vary` derives a
point's settings, `seeded` gives launch k its own seeds, and `run_cached`
reuses a launch directory whose launch.json matches what would be run: the SUT
spec, the settings, the remote batcher knobs, and where the load workers run
(`engine`: in this process or local processes, or the `OnEngine` launcher's
engine, such as Ray at an address with K workers a node; and the worker count).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.api import run_test
from loadgen.engine.workers.base import Engine
from loadgen.errors import ResultError
from loadgen.plan.settings import (
    DEV_PRESET,
    SCENARIO_DEFAULTS,
    TestSettings,
    settings_from_mapping,
)
from loadgen.report.result import RunResult, read_result

__all__ = ["SEED_MOD", "Launcher", "OnEngine", "engine_stamp", "launch", "plain", "run_cached",
           "seeded", "vary"]

SEED_MOD = 2**64

Launcher = Callable[[TestSettings, str, Path], RunResult]
"""(settings, SUT spec, run directory) -> the launch's result, written there."""


def vary(settings: TestSettings, changes: Mapping[str, Any]) -> TestSettings:
    """The settings with `changes` applied, coerced and validated like a TOML file.

    Passes on every field that differs from its class default or that a scenario or
    preset default would otherwise overwrite; the rest keep their defaults anyway.
    """
    layered = set(DEV_PRESET).union(*SCENARIO_DEFAULTS.values(), ("scenario", "preset"))
    values = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings)
              if f.name in layered or getattr(settings, f.name) != f.default}
    return settings_from_mapping(values | dict(changes))


def plain(value: Any) -> Any:
    """A value as JSON reads it back (tuples as lists, keys as strings)."""
    return json.loads(json.dumps(value))


def launch(settings: TestSettings, spec: str, run_dir: Path) -> RunResult:
    """One launch: a fresh SUT from `spec`, one `run_test`, written to `run_dir`."""
    return run_test(settings, spec, run_dir)


@dataclass(frozen=True, slots=True)
class OnEngine:
    """A launcher whose launches run their load workers on `engine` (Ray actors, say)."""

    engine: Engine

    def __call__(self, settings: TestSettings, spec: str, run_dir: Path) -> RunResult:
        return run_test(settings, spec, run_dir, engine=self.engine)


def engine_stamp(runner: Launcher, settings: TestSettings) -> dict[str, Any]:
    """Where a launch's load workers run, for its launch.json: the `OnEngine` launcher's
    engine key, else this process (one worker) or local processes; and how many."""
    if isinstance(runner, OnEngine):
        where = runner.engine.key()
    else:
        where = {"engine": "processes" if settings.workers > 1 else "in process"}
    return {**plain(where), "workers": settings.workers}


def run_cached(settings: TestSettings, spec: str, run_dir: Path, runner: Launcher = launch,
               knobs: Mapping[str, Any] | None = None) -> tuple[RunResult, bool]:
    """Reuse the result in `run_dir` when its launch.json matches, else run; -> (result, reused).

    `knobs` are the remote batcher knobs the launch runs under, stamped with it.
    """
    stamp = {"sut": spec, "settings": plain(settings.as_dict()),
             "engine": engine_stamp(runner, settings)}
    if knobs:
        stamp["batcher"] = plain(dict(knobs))
    stamp_path, result_path = run_dir / "launch.json", run_dir / "result.json"
    if stamp_path.is_file() and result_path.is_file():
        try:
            if json.loads(stamp_path.read_text()) == stamp:
                return read_result(result_path), True
        except (OSError, json.JSONDecodeError, ResultError):
            pass
    result = runner(settings, spec, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    stamp_path.write_text(json.dumps(stamp, indent=2) + "\n")
    return result, False


def seeded(settings: TestSettings, k: int) -> TestSettings:
    """Launch k's settings: the schedule and sample-index seeds shifted by k."""
    if k == 0:
        return settings
    return dataclasses.replace(
        settings,
        schedule_rng_seed=(settings.schedule_rng_seed + k) % SEED_MOD,
        sample_index_rng_seed=(settings.sample_index_rng_seed + k) % SEED_MOD)
