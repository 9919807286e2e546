import pytest

from loadgen.errors import SettingsError
from loadgen.plan.settings import Scenario, load_settings, parse_overrides


def test_mlperf_defaults_per_scenario():
    single = load_settings(None, ["scenario='SingleStream'"])
    multi = load_settings(None, ["scenario='MultiStream'"])
    server = load_settings(None, ["target_latency_ms=10"])
    assert single.target_latency_percentile == 90 and single.min_duration_s == 600
    assert multi.samples_per_query == 8 and multi.target_latency_percentile == 99
    assert server.scenario is Scenario.SERVER and server.target_latency_percentile == 99
    assert server.compliant


def test_dev_preset_is_short_and_not_compliant():
    s = load_settings(None, ["preset='dev'", "target_latency_ms=10"])
    assert s.min_duration_s < 600 and not s.compliant
    assert s.as_dict()["compliant"] is False


def test_file_then_overrides(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('scenario = "Server"\ntarget_qps = 50\ntarget_latency_ms = 5\n')
    s = load_settings(f, ["target_qps=75.5"])
    assert s.target_qps == 75.5 and s.target_latency_ms == 5


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("bogus=1", "bogus: unknown key"),
        ("target_qps='fast'", "target_qps: expected a number"),
        ("target_qps=-5", "target_qps: must not be negative"),
        ("target_latency_percentile=100", "target_latency_percentile: must be in (0, 100)"),
        ("target_latency_percentile=0", "target_latency_percentile: must be in (0, 100)"),
        ("min_query_count=1.5", "min_query_count: expected an integer"),
        ("scenario='Batch'", "scenario: 'Batch' is not one of"),
        ("arrival='weibull'", "arrival: 'weibull' is not one of"),
    ],
)
def test_bad_values_name_the_key(override, named):
    with pytest.raises(SettingsError) as err:
        load_settings(None, ["target_latency_ms=10", override])
    assert any(p.startswith(named) for p in err.value.problems), err.value.problems


def test_every_problem_is_reported_at_once():
    with pytest.raises(SettingsError) as err:
        load_settings(None, ["nope=1", "target_qps=-1", "target_latency_percentile=101"])
    assert len(err.value.problems) >= 3


def test_server_requires_slo():
    with pytest.raises(SettingsError, match="target_latency_ms"):
        load_settings(None, [])


def test_overrides_parse_toml_literals_and_bare_strings():
    assert parse_overrides(["a=1", "b=2.5", "c=true", "d=Server", "e='x'"]) == {
        "a": 1, "b": 2.5, "c": True, "d": "Server", "e": "x"}
    with pytest.raises(SettingsError):
        parse_overrides(["novalue"])


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(SettingsError, match="no such file"):
        load_settings(tmp_path / "absent.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("scenario = ")
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings(bad)


def test_shipped_scenarios_validate():
    from pathlib import Path

    files = sorted(Path(__file__).parents[3].joinpath("scenarios").glob("*.toml"))
    assert files
    for f in files:
        load_settings(f)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["burstiness=0"], "burstiness: must be above 0"),
        (["burstiness='very'"], "burstiness: expected a number"),
        (["ramp=1"], "ramp: expected true or false"),
        (["steps=5"], "steps: expected an array"),
        (["steps=[[0, 1, 2]]"], "steps: step 0 must be [start_s, qps]"),
        (["steps=[[0, true]]"], "steps: step 0 must be [start_s, qps]"),
        (["arrival='steps'"], "steps: arrival 'steps' needs steps"),
        (["arrival='steps'", "steps=[[1, 100]]"], "steps: the first step must start at 0"),
        (["arrival='steps'", "steps=[[0, 100], [0, 200]]"], "steps: start times must increase"),
        (["arrival='steps'", "steps=[[0, -1], [1, 5]]"], "steps: a rate must not be negative"),
        (["arrival='steps'", "steps=[[0, 100], [1, 0]]"], "steps: the last step needs a positive"),
        (["arrival='steps'", "steps=[[0, 100], [700, 200]]"], "steps: a step starts at 700 s"),
        (["arrival='burst'"], "burst_duration_s: arrival 'burst' needs"),
        (["burst_duration_s=2", "burst_period_s=1"], "burst_period_s: must be longer"),
        (["burst_start_s=-1"], "burst_start_s: must not be negative"),
        (["burst_qps_factor=0"], "burst_qps_factor: must be above 0"),
        (["time_scale=0"], "time_scale: must be above 0"),
        (["window_s=-1"], "window_s: must be above 0"),
        (["arrival='trace'"], "trace_file: arrival 'trace' needs a trace file"),
        (["arrival='trace'", "trace_file='/no/such.csv'"], "trace_file: no such file"),
        (["schedule_file='/no/schedule.bin'"], "schedule_file: no such file"),
        (["workers=0"], "workers: must be at least 1"),
        (["workers=2", "scenario='SingleStream'"], "workers: SingleStream need a single issuer"),
        (["arrival='gamma'", "target_qps=0"], "target_qps: Server needs a positive rate"),
    ],
)
def test_arrival_keys_are_validated_by_name(overrides, named):
    with pytest.raises(SettingsError) as err:
        load_settings(None, ["target_latency_ms=10", *overrides])
    assert any(p.startswith(named) for p in err.value.problems), err.value.problems


def test_arrival_keys_from_toml(tmp_path):
    f = tmp_path / "t.toml"
    f.write_text('arrival = "steps"\nsteps = [[0, 100], [10, 200.5]]\nramp = true\n'
                 "target_latency_ms = 5\nworkers = 2\n")
    s = load_settings(f)
    assert s.steps == ((0.0, 100.0), (10.0, 200.5)) and s.ramp is True and s.workers == 2
    assert s.as_dict()["steps"] == [[0.0, 100.0], [10.0, 200.5]]
    # steps and trace runs take their rate from the plan, not from target_qps
    assert load_settings(f, ["target_qps=0"]).target_qps == 0
