"""The worker interface every engine implements, and the messages a worker sends.

A worker (one load process or one Ray actor) builds its SUT from the spec,
reports `ready`, answers clock pings, waits to be released at its own
deadline (on its own clock), says `started` with its start slack, streams
`report`s as the run goes (each what its tally gained since the last one,
`record.deltas`), a light `progress` between them (its counters and running
glance, for live displays) and ends with `done` (the last gain, and its cost).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from loadgen.errors import LoadgenError
from loadgen.plan.plan import RunPlan

__all__ = ["DONE", "ERROR", "PROGRESS", "READY", "REPORT", "STARTED", "WORKERS_DIR", "Engine",
           "Message", "Placement", "Worker", "WorkerLost", "worker_dir"]

WORKERS_DIR = "workers"
"""Each worker's own files go to RUN_DIR/WORKERS_DIR/<i>/ (`worker_dir`), whatever engine
runs it."""

READY, STARTED, REPORT, PROGRESS, DONE, ERROR = (
    "ready", "started", "report", "progress", "done", "error")
Message = tuple[str, Any]
"""(kind, body): READY the SUT's description, STARTED {"start_slack_ns"} once released,
REPORT, PROGRESS and DONE a `WorkerCore` dict, ERROR the failure's text."""


def worker_dir(out_dir: Path, index: int) -> Path:
    """Where worker `index` of a run in `out_dir` keeps its own files."""
    return out_dir / WORKERS_DIR / str(index)


class WorkerLost(LoadgenError):
    """A worker stopped answering: its process, actor or node is gone."""


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a worker runs: its host name and, on a cluster, its node id."""

    host: str
    node: str


class Worker(Protocol):
    """The driver's handle on one worker."""

    index: int
    label: str  # for messages: 'load process 1', 'Ray worker 1'

    def placement(self) -> Placement:
        """Where it runs."""

    def wait_ready(self, timeout_s: float) -> dict[str, Any]:
        """Block until its SUT is up; the SUT's description (raises SutError, WorkerLost)."""

    def clock(self) -> int:
        """Its clock now (`perf_counter_ns` over there): one ping."""

    def release(self, deadline_ns: int) -> None:
        """Start its schedule at `deadline_ns` on its own clock; sent without waiting for
        an answer, so every worker's release goes out at once (a failure shows later, in
        `messages`)."""

    def messages(self) -> list[Message]:
        """What it sent since the last call, without waiting (raises WorkerLost)."""

    def interrupt(self) -> None:
        """Stop issuing now (Ctrl-C); it drains and reports what it has."""


class Engine(Protocol):
    """Starts workers somewhere and describes where."""

    name: str

    def start(self, plan: RunPlan, spec: str, out_dir: Path | None) -> list[Worker]:
        """Start `plan.settings.workers` workers on the plan (each keeps its share)."""

    def wait(self, workers: Sequence[Worker], timeout_s: float) -> None:
        """Block until one of `workers` (those still running) has sent something, or
        `timeout_s` has passed."""

    def describe(self) -> dict[str, Any]:
        """For result.json's `distributed` block: engine, version, nodes."""

    def key(self) -> dict[str, Any]:
        """What decides where its workers run (engine, address, placement), for a cache of
        launches: two engines with the same key run a plan the same way."""

    def close(self) -> None:
        """Stop every worker it started."""
