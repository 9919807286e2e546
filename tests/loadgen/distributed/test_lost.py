"""A worker lost mid-run: the others finish, the run is INVALID naming it, nothing received is
lost, its unissued share is missing. Also the skew verdict."""

import os
import signal

from loadgen.api import run_test
from loadgen.engine.processes import LocalProcesses
from loadgen.engine.workers.base import REPORT
from loadgen.judge.distributed import SKEW_WARN_NS, distributed_verdict
from loadgen.judge.verdict import ReasonCode
from loadgen.plan.plan import RunPlan
from loadgen.plan.schedule import share_size
from loadgen.plan.settings import load_settings

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
    lost, = r.distributed["lost"]
    assert text.startswith(f"load process 1 on host {lost['host']} was lost")
    assert "scheduled time" in text and "missing" in text
    assert lost["planned"] == share_size(plan, 1, 2)
    assert 0 < lost["issued"] < lost["planned"]
    assert lost["missing"] == lost["planned"] - lost["issued"]
    assert 1.5 < lost["last_report_scheduled_s"] < 4
    statuses = [w["status"] for w in r.distributed["workers"]]
    assert statuses == ["done", "lost"]
    survivor, partial = r.workers["per_worker"]
    assert survivor["issued"] == share_size(plan, 0, 2)  # the survivor finished its share
    assert partial["issued"] == lost["issued"] and partial["queries"] > 0  # kept, up to its report
    assert r.stats.queries == survivor["queries"] + partial["queries"]
    assert r.stats.errors == 0


def _block(skew_ns, lost=()):
    return {"skew_bound_ns": skew_ns, "lost": list(lost)}


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
