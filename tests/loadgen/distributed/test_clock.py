"""Clock offsets: estimated within half the round trip, and corrected by the driver."""

import time

import numpy as np
import pytest

from loadgen.engine.session import SessionOutcome
from loadgen.engine.workers.base import Placement
from loadgen.engine.workers.clock import measure_offset, skew_bound_ns
from loadgen.engine.workers.driver import run_workers
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import load_settings
from tests.loadgen.fakes import empty_done

PLAN = ["preset='dev'", "target_latency_ms=10", "target_qps=100", "min_duration_s=1",
        "warmup_s=0.5", "workers=2"]


class FakeNetwork:
    """A driver clock and a worker clock `offset_ns` apart, joined by random one-way delays."""

    def __init__(self, offset_ns: int, seed: int) -> None:
        self.now, self.offset_ns = 1_000_000_000, offset_ns
        self.rng = np.random.default_rng(seed)

    def clock(self) -> int:
        return self.now

    def ping(self) -> int:
        self.now += int(self.rng.exponential(200_000)) + 20_000  # there (asymmetric, random)
        theirs = self.now + self.offset_ns
        self.now += int(self.rng.exponential(50_000)) + 20_000  # and back
        return theirs


@pytest.mark.parametrize("offset_ns", [0, 123_456_789, -987_654_321_000])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_offset_is_estimated_within_half_the_kept_round_trip(offset_ns, seed):
    net = FakeNetwork(offset_ns, seed)
    reading = measure_offset(net.ping, clock=net.clock)
    assert abs(reading.offset_ns - offset_ns) <= reading.error_ns
    assert reading.error_ns == (reading.rtt_ns + 1) // 2
    one = measure_offset(net.ping, pings=1, clock=net.clock)
    assert reading.rtt_ns <= one.rtt_ns or reading.rtt_ns < 200_000  # the shortest is kept


def test_the_skew_bound_adds_the_two_widest_uncertainties():
    assert skew_bound_ns([5]) == 5
    assert skew_bound_ns([3, -9, 4, 1]) == 13


class SkewedWorker:
    """A worker whose clock runs `offset_ns` ahead of this process's (and drifts by
    `drift_ns` once released); it 'runs' by answering DONE with a tally that starts at
    its deadline on its own clock."""

    def __init__(self, index: int, plan: RunPlan, offset_ns: int, drift_ns: int) -> None:
        self.index, self.label, self.plan = index, f"fake {index}", plan
        self.offset_ns, self.drift_ns = offset_ns, drift_ns
        self.deadline_ns: int | None = None

    def placement(self) -> Placement:
        return Placement(f"host{self.index}", f"node{self.index}")

    def wait_ready(self, timeout_s: float) -> dict:
        return {"name": "fake"}

    def clock(self) -> int:
        drift = 0 if self.deadline_ns is None else self.drift_ns
        return time.perf_counter_ns() + self.offset_ns + drift

    def release(self, deadline_ns: int) -> None:
        self.deadline_ns = deadline_ns

    def messages(self) -> list:
        return [empty_done(self.plan, self.deadline_ns)]

    def interrupt(self) -> None:
        pass


class SkewedEngine:
    name = "fake"

    def wait(self, workers, timeout_s):
        pass

    def __init__(self, offsets: list[int], drift_ns: int = 0) -> None:
        self.offsets, self.drift_ns, self.workers = offsets, drift_ns, []

    def start(self, plan, spec, out_dir):
        self.workers = [SkewedWorker(i, plan, o, self.drift_ns)
                        for i, o in enumerate(self.offsets)]
        return self.workers

    def describe(self):
        return {"engine": self.name, "version": None, "nodes": len(self.offsets)}

    def close(self):
        pass


def test_injected_offsets_are_measured_and_each_worker_starts_at_t0_plus_its_offset():
    plan = RunPlan.of(load_settings(None, PLAN))
    injected = [7_000_000_000, -3_000_000_000]
    engine = SkewedEngine(injected, drift_ns=250_000)
    spread = run_workers(plan, "fake", engine)
    block = spread.distributed
    t0 = block.start_ns
    for worker, figures, offset in zip(engine.workers, block.workers, injected, strict=True):
        error = figures.offset_error_ns
        assert figures.offset_after_error_ns is not None
        assert abs(figures.offset_ns - offset) <= error  # estimated within RTT/2
        true_start = worker.deadline_ns - offset  # its deadline, on the driver's clock
        assert abs(true_start - t0) <= error  # corrected: it starts at T0 within the error
        assert abs(figures.drift_ns - 250_000) <= error + figures.offset_after_error_ns
        assert figures.host == f"host{worker.index}"
    uncertainties = [f.offset_error_ns + abs(f.drift_ns) for f in block.workers]
    assert block.skew_bound_ns == sum(uncertainties)
    assert isinstance(spread.outcome, SessionOutcome)
    times = spread.outcome.tally.times  # the merged tally is on the driver's clock
    assert times.start_ns == t0
    assert abs(times.measure_start_ns - (t0 + plan.warmup_ns)) <= max(
        f.offset_error_ns for f in block.workers)
