"""Several load processes: exact merging, the one-issuer rule, a process's outbox, and a
--workers 2 run end to end."""

import dataclasses
import multiprocessing
import pickle
import threading
from typing import Any

import numpy as np
import pytest

from loadgen.adapters.null import NullSut
from loadgen.api import run_async, run_loop, run_test
from loadgen.engine.workers.processes import _Outbox, workers_warning
from loadgen.errors import SettingsError, SutError
from loadgen.plan.plan import RunPlan
from loadgen.plan.schedule import share_size
from loadgen.plan.settings import load_settings
from loadgen.plan.tracefile import read_schedule
from loadgen.record.collect import Collector
from loadgen.record.histograms import summary_ns
from loadgen.record.hostload import host_load, sample_host
from loadgen.record.querylog import read_binary
from loadgen.record.tally import HISTOGRAMS, RunTimes, merge_tallies
from tests.fairness import skip_if_host_busy

MS = 1_000_000
TIMES = RunTimes(0, 0, 10_000 * MS, 10_000 * MS, False, 0)
DEV = ["preset='dev'", "target_latency_ms=50", "min_duration_s=0.6", "min_query_count=100",
       "target_qps=1500", "warmup_s=0.2", "max_issue_lag_ms=1000"]


def _record(collector, ids, when, latency, service):
    collector.started(0, 0)
    for q in ids:
        collector.issued_query(q, int(when[q]), int(when[q] + service[q]), 1, True)
        if q % 97 == 0:
            collector.failed(q, int(when[q] + latency[q]), "boom")
        else:
            collector.done(q, int(when[q] + latency[q]), components={"queue": int(service[q])})


@pytest.mark.parametrize("parts", [2, 3])
def test_merged_tallies_equal_the_same_queries_recorded_in_one_process(parts):
    rng = np.random.default_rng(11)
    n = 30_000
    when = np.cumsum(rng.exponential(MS / 3, n)).astype(np.int64)  # 3000/s for 10 s
    latency = rng.lognormal(np.log(2 * MS), 0.7, n).astype(np.int64)
    service = rng.integers(1_000, 50_000, n)
    one = Collector(3 * MS)
    _record(one, range(n), when, latency, service)
    shares = [Collector(3 * MS) for _ in range(parts)]
    for i, c in enumerate(shares):
        _record(c, range(i, n, parts), when, latency, service)
    whole, merged = one.tally(TIMES), merge_tallies([c.tally(TIMES) for c in shares])
    for name in HISTOGRAMS:  # exact: same layout, counts added
        assert np.array_equal(np.ctypeslib.as_array(whole.histograms[name].counts),
                              np.ctypeslib.as_array(merged.histograms[name].counts))
        assert summary_ns(whole.histograms[name]) == summary_ns(merged.histograms[name])
    assert summary_ns(whole.components["queue"]) == summary_ns(merged.components["queue"])
    assert (merged.queries, merged.overlatency, merged.errors_by_kind) == (
        whole.queries, whole.overlatency, whole.errors_by_kind)
    assert [(b.queries, b.good, b.errors) for b in merged.windows.timeline] == [
        (b.queries, b.good, b.errors) for b in whole.windows.timeline]


def test_one_issuer_scenarios_refuse_several_workers():
    for extra, word in [("scenario='SingleStream'", "SingleStream need a single issuer"),
                        ("scenario='MultiStream'", "MultiStream need a single issuer"),
                        ("arrival='closed'", "closed-loop arrivals need a single issuer"),
                        ("scenario='Offline'", "Offline and accuracy runs")]:
        with pytest.raises(SettingsError) as err:
            load_settings(None, ["target_latency_ms=5", "workers=2", extra])
        assert any(p.startswith("workers: ") and word in p for p in err.value.problems), extra
    s = load_settings(None, [*DEV, "workers=2"])
    with pytest.raises(SettingsError, match="need a SUT spec"):
        run_loop(run_async(s, NullSut()))


def test_builtin_and_too_many_workers_warn(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    s = load_settings(None, [*DEV, "workers=3"])
    assert "3 separate models" in workers_warning(s, "builtin:mlp")
    assert workers_warning(s, "null") is None
    assert workers_warning(dataclasses.replace(s, workers=1), "builtin:mlp") is None
    assert "use at most 7" in workers_warning(dataclasses.replace(s, workers=8), "null")


@pytest.mark.serial  # two spinning workers' issue lag; skips on a loaded host
def test_two_workers_on_the_null_sut_make_one_ordinary_result(tmp_path):
    settings = load_settings(None, [*DEV, "workers=2"])
    before = sample_host()
    r = run_test(settings, "null", tmp_path / "two")  # its workers are reaped: counted as own
    load = host_load(before, sample_host())
    single = run_test(dataclasses.replace(settings, workers=1), NullSut(), tmp_path / "one")
    keys, single_keys = set(r.to_dict()), set(single.to_dict())
    assert keys - single_keys == {"workers", "distributed"} and single_keys <= keys
    assert r.workers is not None and single.workers is None
    assert r.workers["count"] == 2 and len(r.workers["per_worker"]) == 2
    assert sum(w["queries"] for w in r.workers["per_worker"]) == r.stats.queries
    assert all(w["cpu_s"] > 0 and 0 < w["cpu_share"] < 1.5 for w in r.workers["per_worker"])
    plan = RunPlan.of(settings)  # each worker issued its own share, in all the plan's rate
    assert all(w["issued"] == share_size(plan, w["index"], 2) for w in r.workers["per_worker"])
    assert abs(r.stats.queries - single.stats.queries) < 5 * np.sqrt(single.stats.queries)
    assert r.stats.queries > 800 and r.stats.errors == 0 and r.stats.unfinished == 0
    assert r.schedule["queries"] == sum(w["issued"] for w in r.workers["per_worker"])
    assert sum(w["queries"] for w in r.stats.timeline) == r.stats.queries
    # the merged query log: ids apart, every planned query issued at its planned offset
    rows, kinds = read_binary(tmp_path / "two")
    planned = read_schedule(tmp_path / "two" / "schedule.bin").offsets_ns  # the shares' union
    assert kinds == {"ok": 0}
    assert np.unique(rows["query_id"]).size == rows.size == planned.size
    assert np.array_equal(np.sort(rows["scheduled_ns"]), planned)
    lag = np.median(rows["sent_ns"] - rows["scheduled_ns"])
    if lag >= 2 * MS:
        host = {} if load is None else {"host_load": load.as_dict()}
        skip_if_host_busy({"environment": host}, f"median issue lag {lag / MS:.2f} ms, two workers")
    assert lag < 2 * MS
    assert (tmp_path / "two" / "workers" / "1" / "queries.csv").exists()
    assert "Load processes: 2" in (tmp_path / "two" / "summary.txt").read_text()


def test_a_failing_worker_fails_the_run():
    settings = load_settings(None, [*DEV, "workers=2"])
    with pytest.raises(SutError, match=r"load process \d failed: .*bogus"):
        run_test(settings, "sim:bogus=1")


class _Counted:
    """A message body that counts the times it is pickled."""

    pickled = 0

    def __init__(self, payload: bytes) -> None:
        self.payload = payload

    def __reduce__(self) -> tuple[Any, ...]:
        _Counted.pickled += 1
        return _Counted, (self.payload,)


def test_a_report_past_the_pipe_buffer_is_queued_at_once_and_crosses_intact_pickled_once():
    _Counted.pickled = 0
    mine, theirs = multiprocessing.Pipe()  # as the driver's: a socket pair
    outbox = _Outbox(theirs)
    try:
        payload = bytes(range(256)) * (8 << 10)  # 2 MiB: past any pipe or socket buffer
        sizes: list[int] = []
        queued = threading.Event()

        def send() -> None:
            sizes.append(outbox.send("report", _Counted(payload)))
            queued.set()

        threading.Thread(target=send, daemon=True).start()
        assert queued.wait(10)  # back before anything was read: the writer thread writes it
        assert mine.poll(10)
        data = mine.recv_bytes()
        kind, body = pickle.loads(data)  # what `conn.recv` does, our own bytes
        assert kind == "report" and body.payload == payload
        assert len(data) == sizes[0]  # the size the process counts is what crossed
        assert _Counted.pickled == 1
        assert outbox.send_now("pong", 42) > 0  # on this thread, at once
        assert mine.poll(10) and mine.recv() == ("pong", 42)
    finally:
        outbox.close()
        mine.close()
        theirs.close()
