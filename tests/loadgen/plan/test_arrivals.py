"""Arrival processes: seeded statistical checks and tables, no event loop; trace files."""

import dataclasses
import json

import numpy as np
import pytest

from loadgen.errors import SettingsError
from loadgen.plan.arrivals import Burst, Constant, Gamma, Poisson, Steps, Trace
from loadgen.plan.plan import RunPlan, arrival_for
from loadgen.plan.schedule import open_loop_offsets
from loadgen.plan.settings import load_settings
from loadgen.plan.tracefile import read_schedule, read_trace

S = 1e9


def _offsets(process, count, chunk=8192, seed=1):
    rng = np.random.default_rng(seed)
    out, after, planned = [], 0.0, 0
    while planned < count:
        part = process.next_offsets(rng, after, min(chunk, count - planned), planned)
        out.append(part)
        after, planned = float(part[-1]), planned + part.size
    return np.concatenate(out)


def _count(offsets, lo_s, hi_s):
    return int(((offsets >= lo_s * S) & (offsets < hi_s * S)).sum())


@pytest.mark.parametrize("shape", [0.25, 1.0, 4.0])
def test_gamma_interarrivals_have_the_requested_mean_and_cv(shape):
    rate = 2000.0
    gaps = np.diff(_offsets(Gamma(rate, shape), 200_001))
    # 200k gaps. Mean: its standard error is CV/sqrt(n) <= 2/447 = 0.45%, so 2% is > 4 SE.
    # CV: for a gamma the excess kurtosis is 6/k, so SE(s)/s ~ sqrt((2 + 6/k) / n) / 2
    # <= 0.57% at k = 0.25; 3% is > 5 SE. Seeded, so the check is also deterministic.
    assert gaps.mean() == pytest.approx(S / rate, rel=0.02)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / np.sqrt(shape), rel=0.03)


def test_gamma_of_shape_one_is_poisson_in_distribution():
    gaps = np.diff(_offsets(Gamma(1000.0, 1.0), 100_001))
    # exponential: P(gap > mean) = 1/e; binomial SE over 100k gaps is 0.15%
    assert (gaps > 1e6).mean() == pytest.approx(np.exp(-1), abs=0.01)


def test_steps_change_the_rate_at_the_given_times():
    plan = Steps((0.0, 5.0, 10.0, 12.0), (100.0, 1000.0, 0.0, 500.0))
    off = _offsets(plan, 12_000, chunk=1000)
    # Poisson counts: SE = sqrt(n); 500 -> 4.5%, 5000 -> 1.4%; tolerances are > 3 SE
    assert _count(off, 0, 5) == pytest.approx(500, rel=0.15)
    assert _count(off, 5, 10) == pytest.approx(5000, rel=0.05)
    assert _count(off, 10, 12) == 0  # a pause
    assert _count(off, 12, 20) == pytest.approx(4000, rel=0.06)
    assert np.all(np.diff(off) >= 0)


def test_ramp_interpolates_linearly():
    plan = Steps((0.0, 10.0), (0.0, 1000.0), ramp=True)
    off = _offsets(plan, 10_000)
    # rate t * 100/s: 1250 expected in [0, 5), 3750 in [5, 10), then 1000/s
    assert _count(off, 0, 5) == pytest.approx(1250, rel=0.1)
    assert _count(off, 5, 10) == pytest.approx(3750, rel=0.06)
    assert plan.mean_qps(0, 10) == pytest.approx(500)
    assert plan.mean_qps(10, 12) == pytest.approx(1000)


@pytest.mark.parametrize("process", [
    Steps((0.0, 1.0, 2.0), (300.0, 900.0, 100.0)),
    Steps((0.0, 1.0, 3.0), (50.0, 2000.0, 400.0), ramp=True),
    Burst(500.0, 4.0, 0.5, 0.25, 1.0),
])
def test_time_rescaling_gives_unit_exponential_gaps(process):
    off = _offsets(process, 50_000)
    gaps = np.diff(process.cumulative(off))
    # in Lambda units the arrivals are a unit-rate Poisson process: mean 1, CV 1 (SE 0.45%)
    assert gaps.mean() == pytest.approx(1.0, rel=0.02)
    assert gaps.std() == pytest.approx(1.0, rel=0.03)


def test_periodic_bursts_multiply_the_rate_inside_each_burst():
    burst = Burst(1000.0, 3.0, start_s=1.0, duration_s=0.5, period_s=2.0)
    off = _offsets(burst, 150_000)
    phase = (off / S - 1.0) % 2.0
    end_s = off[-1] / S
    inside = (off >= S) & (phase < 0.5)
    in_time = 0.5 * np.floor((end_s - 1) / 2) + min((end_s - 1) % 2, 0.5)
    # ~74k arrivals either way: Poisson SE 0.4%; 2% is 5 SE
    assert inside.sum() / in_time == pytest.approx(3000, rel=0.02)
    assert (~inside).sum() / (end_s - in_time) == pytest.approx(1000, rel=0.02)
    assert burst.peak_qps == 3000


def test_a_single_burst():
    off = _offsets(Burst(200.0, 5.0, start_s=2.0, duration_s=1.0), 3000)
    assert _count(off, 0, 2) == pytest.approx(400, rel=0.2)
    assert _count(off, 2, 3) == pytest.approx(1000, rel=0.12)
    assert _count(off, 3, 5) == pytest.approx(400, rel=0.2)


@pytest.mark.parametrize("extra", [
    ["arrival='gamma'", "burstiness=0.3"],
    ["arrival='burst'", "burst_duration_s=0.2", "burst_period_s=0.5"],
    ["arrival='steps'", "steps=[[0, 1000], [0.4, 3000]]", "ramp=true"],
])
def test_chunking_does_not_change_any_schedule(extra):
    s = load_settings(None, ["preset='dev'", "target_latency_ms=10", "target_qps=2000",
                             "min_duration_s=1", *extra])
    small = np.concatenate(list(open_loop_offsets(RunPlan.of(s), 1000)))
    large = np.concatenate(list(open_loop_offsets(RunPlan.of(s), 8192)))
    assert len(small) == len(large)
    assert np.abs(small - large).max() <= 1  # float rounding only


def test_constant_and_poisson_peaks():
    assert Constant(10).peak_qps == Poisson(10).peak_qps == 10


# -- traces ----------------------------------------------------------------------------------


def test_csv_trace_is_relative_to_the_first_row_and_scaled(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("path,timestamp\n/a,1700000000.5\n/b,1700000000.75\n\n/c,1700000000.75\n"
                 "/d,1700000002.5\n")
    trace = read_trace(f, time_scale=0.5)
    assert trace.offsets_ns.tolist() == [0, 125_000_000, 125_000_000, 1_000_000_000]
    assert len(trace.sha256) == 64 and trace.peak_qps == 3  # [0, 1 s) holds three


def test_json_lines_trace_with_offsets(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"offset_s": 0.25, "x": 1}\n\n{"offset_s": 1}\n{"offset_s": 3}\n')
    assert read_trace(f).offsets_ns.tolist() == [0, 750_000_000, 2_750_000_000]


@pytest.mark.parametrize(("name", "text", "message"), [
    ("a.csv", "timestamp\n1\n3\n2\n", "line 4: 2.0 comes before the previous 3.0"),
    ("a.csv", "offset_s\n0\n-1\n", "line 3: '-1' is negative"),
    ("a.csv", "offset_s\n0\nsoon\n", "line 3: 'soon' is not a number"),
    ("a.csv", "offset_s\n0\nnan\n", "line 3: 'nan' is not finite"),
    ("a.csv", "offset_s\n", "no arrivals"),
    ("a.csv", "", "names no column"),
    ("a.csv", "time,x\n1,2\n", "names no column offset_s or timestamp"),
    ("a.csv", "x,offset_s\n1\n", "line 2: no value in column 'offset_s'"),
    ("a.jsonl", '{"offset_s": 1}\n{"offset_s": true}\n', "line 2: True is not a number"),
    ("a.jsonl", '{"offset_s": 1}\n[1]\n', "line 2: expected an object"),
    ("a.jsonl", '{"offset_s": 1}\n{"offset_s": 1\n', "line 2: not JSON"),
    ("a.jsonl", '{"ts": 1}\n', "line 1: no key offset_s or timestamp"),
    ("a.jsonl", '{"timestamp": 1}\n{"offset_s": 2}\n', "line 2: no key 'timestamp'"),
])
def test_bad_trace_files_raise_settings_errors_naming_the_key(tmp_path, name, text, message):
    f = tmp_path / name
    f.write_text(text)
    with pytest.raises(SettingsError) as err:
        read_trace(f)
    assert err.value.problems[0].startswith("trace_file: ") and message in err.value.problems[0]


def test_unreadable_and_binary_traces(tmp_path):
    with pytest.raises(SettingsError, match="trace_file: cannot read"):
        read_trace(tmp_path / "absent.csv")
    (tmp_path / "b.csv").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(SettingsError, match="not UTF-8"):
        read_trace(tmp_path / "b.csv")


def test_saved_schedules_are_read_as_they_are(tmp_path):
    f = tmp_path / "schedule.bin"
    f.write_bytes(np.array([5, 5, 9], dtype="<i8").tobytes())
    assert read_schedule(f).offsets_ns.tolist() == [5, 5, 9]
    for data, message in [(b"\x00" * 7, "whole number"), (b"", "no arrivals"),
                          (np.array([3, 1], "<i8").tobytes(), "must be sorted"),
                          (np.array([-1], "<i8").tobytes(), "negative")]:
        f.write_bytes(data)
        with pytest.raises(SettingsError, match=f"schedule_file: .*{message}"):
            read_schedule(f)


def _with(settings, process):
    """The plan of `settings`, walking `process` instead of the one they name."""
    return dataclasses.replace(RunPlan.of(settings), arrival=process)


def test_a_trace_is_planned_whole_with_duplicates_across_chunks(tmp_path):
    offsets = np.repeat(np.arange(50, dtype=np.int64) * 1_000_000, 3)
    trace = Trace("x", "0" * 64, offsets)
    s = load_settings(None, ["preset='dev'", "target_latency_ms=10", "min_duration_s=0.001",
                             "min_query_count=1"])
    planned = np.concatenate(list(open_loop_offsets(_with(s, trace), chunk=7)))
    assert np.array_equal(planned, offsets)  # not cut at the minimums, nothing lost at edges
    s = load_settings(None, ["preset='dev'", "target_latency_ms=10", "min_duration_s=0",
                             "min_query_count=1", "max_query_count=20"])
    assert len(np.concatenate(list(open_loop_offsets(_with(s, trace), chunk=7)))) == 20


def test_trace_settings_resolve_relative_to_the_toml_file(tmp_path):
    (tmp_path / "t.csv").write_text("offset_s\n0\n0.5\n")
    toml = tmp_path / "t.toml"
    toml.write_text('arrival = "trace"\ntrace_file = "t.csv"\ntarget_latency_ms = 5\n')
    s = load_settings(toml)
    assert s.trace_file == str(tmp_path / "t.csv")
    assert arrival_for(s).offsets_ns.tolist() == [0, 500_000_000]


def test_settings_json_round_trip_keeps_steps():
    s = load_settings(None, ["target_latency_ms=5", "arrival='steps'",
                             "steps=[[0, 10], [2.5, 20]]"])
    again = load_settings(None, [f"steps={json.dumps(s.as_dict()['steps'])}",
                                 "arrival='steps'", "target_latency_ms=5"])
    assert again.steps == s.steps == ((0.0, 10.0), (2.5, 20.0))
