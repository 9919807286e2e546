"""The host's own load over a run (environment.host_load) and the issue-lag advice that
fits the run: a busy host says so, more processes only past one issuer's rate, a closed
loop gets no issue-lag reason at all."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.api import run_test
from loadgen.judge.verdict import ReasonCode, evaluate
from loadgen.plan.settings import load_settings
from loadgen.record.hostload import HostLoad, HostSample, host_load, sample_host
from tests.loadgen.judge.test_verdict import LAG, MS, _plan, _stats

QUIET = HostLoad(10.0, 8, 0.5, 0.00625, 0.0, 0.3, 0.4)
BUSY = HostLoad(10.0, 2, 12.0, 0.6, 14.0, 3.2, 4.1)


def _lagging(plan: Any) -> Any:
    return _stats(plan, issue_lag_ns=dataclasses.replace(LAG, p99=9 * MS))


def _lag_text(host: HostLoad | None, **values: Any) -> str:
    plan = _plan(**values)
    verdict = evaluate(plan, _lagging(plan), host=host)
    (reason,) = [r for r in verdict.reasons if r.code is ReasonCode.ISSUE_LAG]
    return reason.text


def test_two_samples_give_other_processes_steal_and_load() -> None:
    a = HostSample(100.0, busy_s=50.0, steal_s=1.0, total_s=200.0, own_cpu_s=5.0, loadavg=1.5)
    b = HostSample(110.0, busy_s=65.0, steal_s=4.0, total_s=220.0, own_cpu_s=8.0, loadavg=2.5)
    load = host_load(a, b, cores=2)
    assert load is not None
    assert load.other_cpu_s == pytest.approx(12.0) and load.other_cpu_share == pytest.approx(0.6)
    assert load.steal_pct == pytest.approx(15.0) and load.busy
    assert HostLoad.from_dict(load.as_dict()) == dataclasses.replace(
        load, wall_s=10.0, other_cpu_s=12.0, other_cpu_share=0.6, steal_pct=15.0)
    assert host_load(a, None) is None and host_load(b, a) is None


@pytest.mark.parametrize(("load", "busy"), [
    (QUIET, False), (BUSY, True),
    (HostLoad(10.0, 4, 0.0, 0.0, 11.0, 0.1, 0.1), True),  # steal alone
    (HostLoad(10.0, 2, 0.0, 0.0, 0.0, 0.1, 2.0), True),  # load average alone
])
def test_busy(load: HostLoad, busy: bool) -> None:
    assert load.busy is busy


def test_a_busy_host_is_named_and_a_low_rate_is_not_told_to_slow_down() -> None:
    text = _lag_text(BUSY)
    assert "the host was busy (other processes used 60% of the 2 cores, CPU steal 14%, " \
           "load average 4.1)" in text
    assert "quieter host" in text
    assert "lower target_qps" not in text and "--workers" not in text  # 100 QPS
    assert "shares its CPU" in text  # two cores


def test_a_rate_past_one_issuer_is_told_to_spread() -> None:
    text = _lag_text(QUIET, target_qps=50_000, min_query_count=1000)
    assert "--workers 3" in text and "busy" not in text


def test_closed_loop_and_offline_get_no_issue_lag_reason() -> None:
    for values in ({"arrival": "closed", "concurrency": 4}, {"scenario": "SingleStream"},
                   {"scenario": "Offline"}):
        plan = _plan(**values)
        codes = evaluate(plan, _lagging(plan), host=BUSY).codes
        assert ReasonCode.ISSUE_LAG not in codes, values


def test_a_run_records_the_host_load(tmp_path: Path) -> None:
    if sample_host() is None:
        pytest.skip("no /proc/stat: not Linux")
    run_test(load_settings(None, ["preset='dev'", "min_duration_s=0.5", "min_query_count=50",
                                  "target_latency_ms=50", "energy='off'"]), "null",
             out_dir=tmp_path)
    host = json.loads((tmp_path / "result.json").read_text())["environment"]["host_load"]
    assert host["cores"] >= 1 and 0.4 < host["wall_s"] < 60
    assert 0 <= host["other_cpu_share"] <= 1 and host["steal_pct"] >= 0
    assert isinstance(host["busy"], bool)
