"""On a real Ray cluster (a head and two 1-CPU nodes on loopback, `ray.cluster_utils`):
workers land on distinct nodes; the union of their sends, stamped on arrival at one
loopback server on one clock, matches the plan within the reported skew bound; a node
removed mid-run gives INVALID, naming the worker, with the survivor's data intact.

Skipped without Ray (`pip install 'loadgen[ray]'`). The head has no CPU (workers never
land there), each node 1 CPU and the smallest object store Ray accepts.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from loadgen.api import run_test
from loadgen.engine.workers.ray_actors import RayEngine
from loadgen.judge.verdict import ReasonCode
from loadgen.plan.plan import RunPlan
from loadgen.plan.schedule import share_size
from loadgen.plan.settings import load_settings
from loadgen.plan.tracefile import read_schedule
from loadgen.record.progress import Progress
from tests.oipwire.oip_echo import MODEL, EchoServer

ray = pytest.importorskip("ray")
cluster_utils = pytest.importorskip("ray.cluster_utils")

pytestmark = pytest.mark.functional

STORE_BYTES = 80 << 20  # about the smallest object store Ray accepts
RUN = ["preset='dev'", "target_latency_ms=100", "target_qps=150", "warmup_s=0.5",
       "min_duration_s=2", "min_query_count=100", "max_issue_lag_ms=1000", "workers=2"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[object, list[object]]]:
    c = cluster_utils.Cluster(initialize_head=True, head_node_args={
        "num_cpus": 0, "object_store_memory": STORE_BYTES, "include_dashboard": False})
    try:
        nodes = [c.add_node(num_cpus=1, object_store_memory=STORE_BYTES) for _ in range(2)]
        c.wait_for_nodes()
        ray.init(address=c.address, include_dashboard=False, log_to_driver=False,
                 logging_level="error")
        yield c, nodes
    finally:
        ray.shutdown()
        c.shutdown()


class Stamping(EchoServer):
    """The echo server, stamping each infer request's arrival on this host's clock."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: list[int] = []

    def tick(self) -> str:
        self.stamps.append(time.perf_counter_ns())
        return super().tick()


@contextlib.contextmanager
def stamping_server() -> Iterator[tuple[Stamping, str]]:
    """A `Stamping` server on its own loop and thread; its http spec."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="stamping-server", daemon=True)
    thread.start()
    server = Stamping()
    try:
        port, _ = asyncio.run_coroutine_threadsafe(server.start(), loop).result(30)
        yield server, f"http://127.0.0.1:{port}/{MODEL}"
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def test_workers_spread_over_nodes_and_their_sends_match_the_plan(cluster, tmp_path: Path):
    _, nodes = cluster
    with stamping_server() as (server, spec):
        r = run_test(load_settings(None, RUN), spec, tmp_path, engine=RayEngine("auto"))
        arrivals = np.sort(np.array(server.stamps, dtype=np.int64))
    d = r.distributed
    assert d is not None
    assert d.engine == "ray" and d.version == ray.__version__ and d.nodes == 3
    placed = {w.node for w in d.workers}
    assert placed == {n.node_id for n in nodes}  # one worker on each node, none on the head
    assert r.stats.errors == 0 and not d.lost
    assert not {ReasonCode.CLOCK_SKEW, ReasonCode.WORKER_LOST} & set(r.verdict.codes)
    planned = read_schedule(tmp_path / "schedule.bin").offsets_ns + d.start_ns
    assert arrivals.size == planned.size  # every planned query arrived, once
    early = planned - arrivals  # > 0: arrived before it was due on the driver's clock
    assert early.max() <= d.skew_bound_ns  # none earlier than the skew bound allows
    assert np.median(arrivals - planned) < 20_000_000  # and they follow the plan


def test_a_node_removed_mid_run_invalidates_the_run_and_keeps_the_survivor(cluster, tmp_path):
    c, nodes = cluster
    doomed = nodes[1]
    plan = RunPlan.of(load_settings(None, [*RUN, "min_duration_s=8"]))

    def remove_once(p: Progress) -> None:
        if p.elapsed_ns >= 4_000_000_000 and doomed in c.worker_nodes:
            c.remove_node(doomed)

    started = time.monotonic()
    r = run_test(plan, "null", tmp_path, progress=remove_once, engine=RayEngine("auto"))
    assert time.monotonic() - started < 120
    assert not r.valid and ReasonCode.WORKER_LOST in r.verdict.codes
    assert r.distributed is not None
    lost, = r.distributed.lost
    gone = next(w for w in r.distributed.workers if w.status == "lost")
    kept = next(w for w in r.distributed.workers if w.status == "done")
    assert gone.node == doomed.node_id and lost.index == gone.index
    text = next(x.text for x in r.verdict.reasons if x.code is ReasonCode.WORKER_LOST)
    assert text.startswith(f"Ray worker {gone.index} on host {lost.host} was lost")
    assert 0 < lost.issued < lost.planned == share_size(plan, gone.index, 2)
    survivor = next(w for w in r.workers["per_worker"] if w["index"] == kept.index)
    assert survivor["issued"] == share_size(plan, kept.index, 2)  # finished its share
    partial = next(w for w in r.workers["per_worker"] if w["index"] == gone.index)
    assert partial["queries"] > 0  # the lost worker's reports up to its last are merged
    assert r.stats.queries == survivor["queries"] + partial["queries"] and r.stats.errors == 0
