"""The start of a run over workers: slow things first, then clocks, T0 and the release;
each worker's start slack; late starts (`start_late`) told apart from skew (`clock_skew`)."""

import time

from loadgen.api import run_test
from loadgen.engine.workers.base import STARTED, Placement
from loadgen.engine.workers.driver import MIN_START_MARGIN_NS, run_workers, start_margin_ns
from loadgen.judge.distributed import distributed_verdict
from loadgen.judge.verdict import ReasonCode
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import load_settings
from loadgen.record.distributed import Distributed
from tests.loadgen.fakes import empty_done

SERVER = ["preset='dev'", "target_latency_ms=300", "target_qps=300", "min_duration_s=2",
          "min_query_count=300", "warmup_s=0.5", "max_issue_lag_ms=250", "workers=2"]


class SlowIdleMeter:
    """An energy meter whose idle reading takes `idle_s` (as NVML's and RAPL's do), noting
    when each step ran."""

    def __init__(self, idle_s: float) -> None:
        self.idle_s, self.events = idle_s, []

    def idle(self) -> None:
        self.events.append(("idle", time.perf_counter_ns()))
        time.sleep(self.idle_s)  # the reading's own duration, not a wait on anything

    def start(self) -> None:
        self.events.append(("start", time.perf_counter_ns()))

    def stop(self):
        return None

    def close(self) -> None:
        pass


def test_a_slow_idle_reading_leaves_every_worker_released_in_time_and_the_run_valid(
        tmp_path, monkeypatch):
    meter = SlowIdleMeter(1.0)
    monkeypatch.setattr("loadgen.engine.watch._meter", lambda plan: meter)
    r = run_test(RunPlan.of(load_settings(None, SERVER)), "null", tmp_path)
    assert [kind for kind, _ in meter.events] == ["idle", "start"]
    per_worker = r.workers["per_worker"]
    assert len(per_worker) == 2
    assert all(w["start_slack_ns"] > 0 for w in per_worker), per_worker
    assert ReasonCode.START_LATE not in r.verdict.codes
    assert ReasonCode.CLOCK_SKEW not in r.verdict.codes
    assert r.valid, r.verdict.reasons
    block = r.distributed
    assert block is not None and block.start_margin_ns >= MIN_START_MARGIN_NS
    assert 0 < block.release_cost_ns < block.start_margin_ns
    assert all(w.start_slack_ns is not None and w.start_slack_ns > 0 for w in block.workers)
    assert 0 <= r.workers["driver"]["cpu_share"] < 1.5
    assert all(w["messages"] > 0 and w["sent_kib"] > 0 and w["longest_stall_ns"] is not None
               for w in per_worker)
    for w in per_worker:  # what could make the cost per query grow with the process count
        assert w["plan_s"] > 0 and 0 <= w["plan_in_run_s"] <= w["plan_s"], w
        assert w["gc_collections"] >= 0 and w["gc_ms"] >= 0 and w["max_rss_mib"] > 10, w
        assert w["minor_faults"] >= 0 and w["last_cpu"] in w["cpus"], w
    harness = next(line for line in (tmp_path / "summary.txt").read_text().splitlines()
                   if line.startswith("Harness"))
    assert "#0 cpu" in harness and "#1 cpu" in harness and "driver cpu" in harness


def test_the_margin_grows_with_the_cost_of_the_releases():
    assert start_margin_ns([]) == MIN_START_MARGIN_NS
    assert start_margin_ns([1_000_000, 3_000_000]) == MIN_START_MARGIN_NS + 4 * 7_000_000


class ScriptedWorker:
    """A fake worker: exact clock, released at its deadline; it says the start slack it is
    given, drifts by `drift_ns` once released, and ends with an empty tally."""

    def __init__(self, index: int, plan: RunPlan, slack_ns: int, drift_ns: int) -> None:
        self.index, self.label, self.plan = index, f"fake {index}", plan
        self.slack_ns, self.drift_ns = slack_ns, drift_ns
        self.deadline_ns: int | None = None

    def placement(self) -> Placement:
        return Placement(f"host{self.index}", "node")

    def wait_ready(self, timeout_s: float) -> dict:
        return {"name": "fake"}

    def clock(self) -> int:
        return time.perf_counter_ns() + (0 if self.deadline_ns is None else self.drift_ns)

    def release(self, deadline_ns: int) -> None:
        self.deadline_ns = deadline_ns

    def messages(self) -> list:
        return [(STARTED, {"start_slack_ns": self.slack_ns}),
                empty_done(self.plan, self.deadline_ns)]

    def interrupt(self) -> None:
        pass


class ScriptedEngine:
    name = "fake"

    def __init__(self, slacks_ns: list[int], drift_ns: int = 0) -> None:
        self.slacks_ns, self.drift_ns = slacks_ns, drift_ns

    def start(self, plan, spec, out_dir):
        return [ScriptedWorker(i, plan, s, self.drift_ns) for i, s in enumerate(self.slacks_ns)]

    def wait(self, workers, timeout_s: float) -> None:
        pass

    def describe(self):
        return {"engine": self.name, "version": None, "nodes": len(self.slacks_ns)}

    def close(self):
        pass


def _codes(engine: ScriptedEngine) -> tuple[list[ReasonCode], Distributed]:
    plan = RunPlan.of(load_settings(None, SERVER))
    block = run_workers(plan, "fake", engine).distributed
    reasons, _ = distributed_verdict(plan, block)
    return [r.code for r in reasons], block


def test_a_worker_released_after_its_first_query_is_start_late_not_clock_skew():
    codes, block = _codes(ScriptedEngine([40_000_000, -900_000_000]))
    assert codes == [ReasonCode.START_LATE]
    assert [w.start_slack_ns for w in block.workers] == [40_000_000, -900_000_000]
    plan = RunPlan.of(load_settings(None, SERVER))
    reasons, _ = distributed_verdict(plan, block)
    assert "worker 1 on host host1 900.000 ms late" in reasons[0].text


def test_lateness_within_the_issue_lag_tolerance_is_no_fault():
    codes, _ = _codes(ScriptedEngine([-10_000_000, 5_000_000]))  # 10 ms late, 250 ms allowed
    assert codes == []


def test_workers_on_time_but_misaligned_give_clock_skew_alone():
    codes, block = _codes(ScriptedEngine([30_000_000, 30_000_000], drift_ns=400_000_000))
    assert codes == [ReasonCode.CLOCK_SKEW]
    assert block.skew_bound_ns > RunPlan.of(load_settings(None, SERVER)).warmup_ns
