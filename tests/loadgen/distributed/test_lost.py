"""A worker lost mid-run: the others finish, the run is INVALID naming it, nothing received is
lost, its unissued share is missing. Also the skew verdict."""

import os
import signal
import time

from loadgen.api import run_test
from loadgen.engine.workers import driver
from loadgen.engine.workers.base import DONE, REPORT, Placement
from loadgen.engine.workers.processes import LocalProcesses
from loadgen.judge.distributed import SKEW_WARN_NS, distributed_verdict
from loadgen.judge.verdict import ReasonCode
from loadgen.plan.plan import RunPlan
from loadgen.plan.schedule import share_size
from loadgen.plan.settings import load_settings
from loadgen.record.collect import Collector
from loadgen.record.distributed import Distributed, WorkerClock
from loadgen.record.tally import RunTimes

RUN = ["preset='dev'", "target_latency_ms=50", "target_qps=400", "min_duration_s=5",
       "warmup_s=0.5", "max_issue_lag_ms=1000", "workers=2"]


class KillAfterFirstReport(LocalProcesses):
    """Local processes; process `victim` is killed (SIGKILL) once its first report is in."""

    def __init__(self, victim: int) -> None:
        super().__init__()
        self.victim = victim

    def start(self, plan, spec, out_dir):
        workers = super().start(plan, spec, out_dir)
        victim = workers[self.victim]
        take = victim.messages

        def messages():
            got = take()
            if any(kind == REPORT for kind, _ in got):
                os.kill(victim.proc.pid, signal.SIGKILL)
            return got

        victim.messages = messages
        return workers


def test_a_lost_worker_invalidates_the_run_and_keeps_what_it_sent(tmp_path):
    plan = RunPlan.of(load_settings(None, RUN))
    r = run_test(plan, "null", tmp_path, engine=KillAfterFirstReport(victim=1))
    assert not r.valid and ReasonCode.WORKER_LOST in r.verdict.codes
    text = next(x.text for x in r.verdict.reasons if x.code is ReasonCode.WORKER_LOST)
    assert r.distributed is not None
    lost, = r.distributed.lost
    assert text.startswith(f"load process 1 on host {lost.host} was lost")
    assert "scheduled time" in text and "missing" in text
    assert lost.planned == share_size(plan, 1, 2)
    assert 0 < lost.issued < lost.planned
    assert lost.missing == lost.planned - lost.issued
    assert 1.5 < lost.last_report_scheduled_s < 4
    statuses = [w.status for w in r.distributed.workers]
    assert statuses == ["done", "lost"]
    survivor, partial = r.workers["per_worker"]
    assert survivor["issued"] == share_size(plan, 0, 2)  # the survivor finished its share
    assert partial["issued"] == lost.issued and partial["queries"] > 0  # kept, up to its report
    assert r.stats.queries == survivor["queries"] + partial["queries"]
    assert r.stats.errors == 0


def _clock(index, host, silence_s):
    return WorkerClock(index=index, host=host, node="local", status="done", offset_ns=0,
                       offset_error_ns=0, rtt_ns=0, start_lateness_ns=0, start_slack_ns=None,
                       drift_ns=0, offset_after_ns=0, offset_after_error_ns=0,
                       longest_silence_s=silence_s)


def _block(skew_ns, workers=()):
    return Distributed(engine="processes", version=None, nodes=1, split="seeded thinning",
                       hosts=1, start_ns=0, start_margin_ns=0, release_cost_ns=0,
                       skew_bound_ns=skew_ns, workers=tuple(workers))


def test_the_skew_bound_warns_then_invalidates_above_the_warm_up():
    plan = RunPlan.of(load_settings(None, RUN))
    assert distributed_verdict(plan, _block(SKEW_WARN_NS)) == ([], [])
    reasons, warnings = distributed_verdict(plan, _block(SKEW_WARN_NS + 1))
    assert not reasons and "skew bound is 1.000 ms" in warnings[0]
    reasons, warnings = distributed_verdict(plan, _block(plan.warmup_ns + 1))
    assert [r.code for r in reasons] == [ReasonCode.CLOCK_SKEW] and not warnings
    assert "exceeds the warm-up (500 ms)" in reasons[0].text and "lengthen warmup_s" in reasons[0].text
    cold = RunPlan.of(load_settings(None, [*RUN, "warmup_s=0", "window_s=0.25"]))
    reasons, _ = distributed_verdict(cold, _block(250_000_001))
    assert "exceeds the window (250 ms)" in reasons[0].text


def test_a_worker_silent_for_a_while_is_flagged():
    plan = RunPlan.of(load_settings(None, RUN))
    workers = [_clock(0, "a", 2.1), _clock(1, "b", 9.5)]
    reasons, warnings = distributed_verdict(plan, _block(0, workers))
    assert not reasons and len(warnings) == 1
    assert warnings[0].startswith("worker 1 on host b sent no report for 9.5 s")


class _Fake:
    """A worker that reports once (its share started, 3 queries issued) and then either
    finishes or falls silent for good."""

    def __init__(self, index: int, plan: RunPlan, silent: bool) -> None:
        self.index, self.label, self.plan, self.silent = index, f"fake worker {index}", plan, silent
        self.sent = 0

    def placement(self) -> Placement:
        return Placement("h", "n")

    def wait_ready(self, timeout_s: float) -> dict:
        return {"sut": "fake"}

    def clock(self) -> int:
        return time.perf_counter_ns()

    def release(self, deadline_ns: int) -> None:
        self.start_ns = deadline_ns

    def messages(self) -> list:
        self.sent += 1
        if self.sent > 1 and self.silent:
            return []
        t = self.start_ns
        tally = Collector(10**7).tally(RunTimes(t, t, t, t, False, 0)).encode()
        kind = REPORT if self.silent else DONE
        return [(kind, {"tally": tally, "issued": 3, "late_ns": 0, "cpu_s": 0.0,
                        "progress": [1_500_000_000, 3, 3, 0, 0]})]

    def interrupt(self) -> None:
        pass


class _FakeEngine:
    name = "fake"

    def wait(self, workers, timeout_s):
        pass

    def start(self, plan, spec, out_dir):
        return [_Fake(0, plan, silent=False), _Fake(1, plan, silent=True)]

    def describe(self):
        return {"engine": "fake", "version": None, "nodes": 1}

    def close(self):
        pass


def test_the_watchdog_gives_up_a_silent_worker(monkeypatch):
    monkeypatch.setattr(driver, "LOST_AFTER_S", 0.3)
    plan = RunPlan.of(load_settings(None, RUN))
    spread = driver.run_workers(plan, "fake", _FakeEngine())
    lost, = spread.distributed.lost
    assert lost.index == 1 and lost.why.startswith("silent for")
    assert lost.issued == 3 and lost.last_report_scheduled_s == 1.5
    assert lost.missing == share_size(plan, 1, 2) - 3
    figures = spread.distributed.workers[1]
    assert figures.status == "lost" and figures.longest_silence_s >= 0.3  # rounded to ms
