"""A run, sweep or find-peak needs no TOML file: --scenario picks a shipped sample (server
by default) and --set the rest; `loadgen scenarios`, `loadgen settings` and `--version`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from loadgen.cli.main import main
from loadgen.plan import settings as settings_module
from loadgen.plan.catalog import unit_of
from loadgen.plan.samples import sample_file, samples

QUICK = ["--set", "preset='dev'", "--set", "min_duration_s=0.5", "--set", "min_query_count=50",
         "--set", "energy='off'", "--quiet"]


def _scenario(out: Path) -> str:
    return str(json.loads((out / "result.json").read_text())["settings"]["scenario"])


@pytest.mark.parametrize(("name", "scenario"), [
    (None, "Server"), ("offline", "Offline"), ("single_stream", "SingleStream"),
    ("MultiStream", "MultiStream"), ("server", "Server")])
def test_run_needs_no_file(name: str | None, scenario: str, tmp_path: Path) -> None:
    chosen = [] if name is None else ["--scenario", name]
    code = main(["run", "--sut", "null", "--out", str(tmp_path), *chosen, *QUICK])
    assert code in (0, 1)
    assert _scenario(tmp_path) == scenario


def test_a_file_and_a_scenario_together_are_refused(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", str(sample_file("server")), "--scenario", "offline", "--sut", "null",
                 "--out", str(tmp_path), *QUICK])
    assert code == 2 and "not both" in capsys.readouterr().err


def test_an_unknown_scenario_names_the_closest(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--scenario", "ofline", "--sut", "null", "--out", str(tmp_path)]) == 2
    assert "did you mean offline?" in capsys.readouterr().err


def test_sweep_and_find_peak_need_no_file(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    assert main(["sweep", "--sut", "null", "--out", str(sweep), "--grid", "target_qps=200,400",
                 "--launches", "1", *QUICK]) == 0
    assert (sweep / "sweep.csv").is_file()
    peak = tmp_path / "peak"
    code = main(["find-peak", "--sut", "sim:service=const:1ms,servers=1", "--out", str(peak),
                 "--start-qps", "200", "--max-qps", "400", "--min-queries", "50",
                 "--tolerance", "0.5", "--repeats", "1", "--budget-s", "10", *QUICK])
    assert code in (0, 1)
    assert json.loads((peak / "peak.json").read_text())["probes"]


def test_samples_ship_in_the_package_and_are_listed(capsys: pytest.CaptureFixture[str]) -> None:
    names = {s.name for s in samples()}
    assert {"server", "offline", "single_stream", "multi_stream"} <= names
    for s in samples():
        assert s.path.is_file() and "loadgen" in s.path.parts and s.summary, s
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for name in names:
        assert f"\n{name} " in f"\n{out}", name


def test_settings_lists_every_key_with_default_unit_and_meaning(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["settings"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = {line.split()[0]: line for line in lines[1:] if line.strip()}
    for f in dataclasses.fields(settings_module.TestSettings):
        assert f.name in rows, f.name
        assert str(f.metadata["doc"]) in rows[f.name], f.name
    assert " ms " in rows["target_latency_ms"] and " 0.0 " in rows["target_latency_ms"]
    assert " queries/s " in rows["target_qps"]


def test_settings_of_a_scenario_shows_its_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["settings", "--scenario", "server"]) == 0
    rows = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()
            if line.strip()}
    assert rows["target_latency_ms"][1] == "20.0" and rows["target_qps"][1] == "200.0"


@pytest.mark.parametrize(("key", "unit"), [
    ("target_latency_ms", "ms"), ("min_duration_s", "s"), ("target_qps", "queries/s"),
    ("energy_sample_hz", "Hz"), ("min_query_count", "count"), ("workers", ""),
    ("target_latency_percentile", "%")])
def test_units_come_from_the_names(key: str, unit: str) -> None:
    assert unit_of(key) == unit


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("loadgen ") and "python" in out
