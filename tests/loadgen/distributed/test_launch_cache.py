"""The launch cache keys on where the load workers run: a result from local processes is
never reused for a launch on Ray (nor for another address, placement or worker count)."""

import json
from pathlib import Path
from typing import ClassVar

import pytest

from loadgen.campaigns.launch import OnEngine, engine_stamp, launch, run_cached
from loadgen.campaigns.search import SearchConfig, find_peak
from loadgen.engine.workers.processes import LocalProcesses
from loadgen.engine.workers.ray_actors import RayEngine
from loadgen.errors import ResultError
from loadgen.plan.settings import load_settings
from loadgen.report.result import RunResult

RUN = ["preset='dev'", "target_latency_ms=100", "target_qps=200", "min_duration_s=0.3",
       "warmup_s=0.1", "max_issue_lag_ms=1000"]


class _Counted(OnEngine):
    """An OnEngine launcher that runs locally and counts (no Ray needed)."""

    calls: ClassVar[list[str]] = []

    def __call__(self, settings, spec: str, run_dir: Path) -> RunResult:
        _Counted.calls.append(run_dir.name)
        return launch(settings, spec, run_dir)


def test_the_stamp_names_the_engine_its_placement_and_the_worker_count():
    one, two = load_settings(None, RUN), load_settings(None, [*RUN, "workers=2"])
    assert engine_stamp(launch, one) == {"engine": "in process", "workers": 1}
    assert engine_stamp(launch, two) == {"engine": "processes", "workers": 2}
    assert engine_stamp(OnEngine(LocalProcesses()), two) == {"engine": "processes", "workers": 2}
    assert engine_stamp(OnEngine(RayEngine("auto", per_node=2)), two) == {
        "engine": "ray", "address": "auto", "per_node": 2, "workers": 2}


def test_a_local_result_is_not_reused_on_ray_and_a_ray_result_is(tmp_path: Path):
    settings, run_dir = load_settings(None, RUN), tmp_path / "run"
    _, reused = run_cached(settings, "null", run_dir)
    assert not reused
    assert run_cached(settings, "null", run_dir)[1]  # same engine: reused
    on_ray = _Counted(RayEngine("local"))
    _Counted.calls.clear()
    assert not run_cached(settings, "null", run_dir, on_ray)[1]
    assert _Counted.calls == ["run"]
    stamp = json.loads((run_dir / "launch.json").read_text())
    assert stamp["engine"] == {"engine": "ray", "address": "local", "per_node": None,
                               "workers": 1}
    assert run_cached(settings, "null", run_dir, on_ray)[1]
    assert not run_cached(settings, "null", run_dir, _Counted(RayEngine("local", 2)))[1]
    assert not run_cached(settings, "null", run_dir)[1]  # back to this process: rerun
    assert len(_Counted.calls) == 2


def test_find_peak_does_not_replay_a_local_journal_on_ray(tmp_path: Path):
    settings = load_settings(None, [*RUN, "scenario='Server'"])
    cfg = SearchConfig(start_qps=100, max_qps=200, min_queries=10, repeats=1, max_probes=1)
    find_peak(settings, "null", tmp_path, cfg)
    with pytest.raises(ResultError, match="engine"):
        find_peak(settings, "null", tmp_path, cfg, runner=_Counted(RayEngine("local")))
    assert json.loads((tmp_path / "journal.jsonl").read_text().splitlines()[0])["engine"] == {
        "engine": "in process", "workers": 1}
