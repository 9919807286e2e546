"""Pinning: `worker_cpus` puts the driver on its first core and each load process on one of
the rest; the result says where each ran."""

import os

import pytest

from loadgen.api import run_test
from loadgen.engine.workers.placement import pin_plan
from loadgen.errors import SettingsError
from loadgen.plan.cpus import parse_cpus
from loadgen.plan.settings import load_settings


def test_a_cpu_list_reads_as_linux_writes_it():
    assert parse_cpus("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpus("2, 2,1") == [2, 1]
    for bad in ("", "a", "3-1", "1-", "-2", "1,,2"):
        with pytest.raises(ValueError):
            parse_cpus(bad)
    with pytest.raises(SettingsError, match="worker_cpus: a range must go up"):
        load_settings(None, ["worker_cpus='5-2'"])


def test_the_driver_takes_the_first_core_and_the_processes_the_rest_in_turn():
    assert pin_plan("", 3) is None
    pins = pin_plan("4-6", 3)
    assert pins.driver == [4] and pins.workers == [[5], [6], [5]]
    one = pin_plan("2", 2)
    assert one.driver == [2] and one.workers == [[2], [2]]


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two usable cores and sched_setaffinity")
def test_a_pinned_run_says_where_each_ran_and_gives_the_driver_its_cores_back():
    first, second = sorted(os.sched_getaffinity(0))[:2]
    before = os.sched_getaffinity(0)
    settings = load_settings(None, [
        "preset='dev'", "target_latency_ms=200", "target_qps=200", "min_duration_s=0.5",
        "min_query_count=50", "warmup_s=0.2", "max_issue_lag_ms=1000", "energy='off'",
        "workers=2", f"worker_cpus='{first},{second}'"])
    r = run_test(settings, "null")
    assert r.workers["driver"]["cpus"] == [first]
    assert [w["cpus"] for w in r.workers["per_worker"]] == [[second], [second]]
    assert os.sched_getaffinity(0) == before
