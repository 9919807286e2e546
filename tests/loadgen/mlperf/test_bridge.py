"""The drop-in in this process: answers from the issuing thread, from other threads, late,
through `response_cb`, and a harness that raises."""

from __future__ import annotations

import array
import collections
import ctypes
import json
import threading
from pathlib import Path

import pytest

import loadgen.mlperf as lg
from loadgen.errors import SettingsError
from loadgen.mlperf.derive import plan_for
from tests.loadgen.mlperf import logfiles


def _settings(scenario: lg.TestScenario, mode: lg.TestMode = lg.TestMode.PerformanceOnly):
    s = lg.TestSettings()
    s.scenario, s.mode = scenario, mode
    s.min_query_count, s.min_duration_ms = 100, 0
    s.server_target_qps, s.offline_expected_qps = 500, 1000
    return s


def _run(tmp: Path, issue, settings: lg.TestSettings, total: int = 32) -> Path:
    log = lg.LogSettings()
    log.log_output.outdir = str(tmp)
    sut = lg.ConstructSUT(issue, lambda: None)
    loaded: list[list[int]] = []
    qsl = lg.ConstructQSL(total, total // 2, loaded.append, lambda s: loaded.append([]))
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, log)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
    assert loaded[-1] == [] and len(loaded) == 2  # loaded once, unloaded once
    return tmp


def test_answers_from_inside_the_issue_callback(tmp_path: Path):
    def issue(samples):
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])

    out = _run(tmp_path, issue, _settings(lg.TestScenario.SingleStream))
    entries = logfiles.detail(out / "mlperf_log_detail.txt")
    assert entries["result_query_count"] == 100 and entries["result_validity"] == "VALID"


def test_multistream_query_completes_when_its_last_sample_does(tmp_path: Path):
    def issue(samples):
        first, rest = samples[:3], samples[3:]
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in first])
        threading.Thread(target=lg.QuerySamplesComplete,
                         args=([lg.QuerySampleResponse(s.id, 0, 0) for s in rest],)).start()

    out = _run(tmp_path, issue, _settings(lg.TestScenario.MultiStream))
    entries = logfiles.detail(out / "mlperf_log_detail.txt")
    assert entries["result_query_count"] == 100
    assert entries["effective_samples_per_query"] == 8
    result = json.loads((out / "result.json").read_text())
    assert result["samples"] == 800 and result["errors"] == 0


def test_response_cb_fills_the_bytes_before_they_are_read(tmp_path: Path):
    buffers = {}

    def fill(response):
        buffers[response.id] = buf = ctypes.create_string_buffer(b"\x01\x02", 2)
        response.data, response.size = ctypes.addressof(buf), 2

    def issue(samples):
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples], fill)

    out = _run(tmp_path, issue, _settings(lg.TestScenario.Offline, lg.TestMode.AccuracyOnly))
    rows = json.loads((out / "mlperf_log_accuracy.json").read_text())
    assert len(rows) == 32 and {r["data"] for r in rows} == {"0102"}


def test_a_harness_that_raises_fails_its_queries(tmp_path: Path):
    def issue(samples):
        raise ValueError("no such sample")

    out = _run(tmp_path, issue, _settings(lg.TestScenario.SingleStream))
    result = json.loads((out / "result.json").read_text())
    assert result["errors"] == 100 and not result["valid"]
    assert "issue callback: ValueError: no such sample" in result["errors_detail"]["error"][
        "messages"][0]
    assert logfiles.detail(out / "mlperf_log_detail.txt")["result_validity"] == "INVALID"


def test_completing_with_no_test_running_is_an_error():
    response = array.array("B", [1])
    with pytest.raises(RuntimeError, match="no test is running"):
        lg.QuerySamplesComplete([lg.QuerySampleResponse(1, response.buffer_info()[0], 1)])


def test_unknown_handles_are_errors(tmp_path: Path):
    with pytest.raises(SettingsError, match="not constructed"):
        lg.StartTest(10**9, 10**9, _settings(lg.TestScenario.SingleStream))


def test_the_star_import_gives_the_binding_names():
    namespace: dict[str, object] = {}
    exec("from loadgen.mlperf import *", namespace)  # noqa: S102 - the drop-in's contract
    names = {"TestSettings", "TestScenario", "TestMode", "LogSettings", "LogOutputSettings",
             "QuerySample", "QuerySampleResponse", "ConstructSUT", "ConstructQSL", "StartTest",
             "StartTestWithLogSettings", "QuerySamplesComplete", "FirstTokenComplete",
             "DestroySUT", "DestroyQSL", "LoggingMode"}
    assert names <= set(namespace)


def test_equal_issue_issues_every_loaded_sample_equally_often(tmp_path: Path):
    issued: list[int] = []

    def issue(samples):
        issued.extend(s.index for s in samples)
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])

    settings = _settings(lg.TestScenario.SingleStream)
    settings.sample_concatenate_permutation = True
    _run(tmp_path, issue, settings)  # 32 samples, 16 loaded: 100 queries padded to 112
    counts = collections.Counter(issued)
    assert len(issued) == 112 and len(counts) == 16 and set(counts.values()) == {7}


def test_the_drop_in_meters_no_energy_as_loadgen():
    for mode, accuracy in ((lg.TestMode.PerformanceOnly, False), (lg.TestMode.AccuracyOnly, True)):
        plan = plan_for(_settings(lg.TestScenario.Server, mode), 32, 16, accuracy=accuracy)
        assert plan.settings.energy == "off"  # no idle reading before a LoadGen test
