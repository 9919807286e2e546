"""Agentic jobs started open loop: each step's requests sent together (fan-out), the next
step once every one of them has ended (fan-in), after the step's think/tool gap.

A job starts at an arrival of the plan (`plan.jobs`: arrival i runs job i mod jobs). Its
first step is due at the arrival plus the step's gap (sent at once without one); a later
step at the end of the last request of the step before plus its gap, on the engine's
precise timers (so never from inside the SUT's completion call). Every request of a
step shares that scheduled time and is sent in the same call, one after the other, each
timed from it like any query. A failed request fails its job: no later step is sent. The
job's time (scheduled start to last end) goes to the `JobRecorder`, for measured jobs.
The first request of a job takes the arrival's query id; the others take ids from
`new_id` (the runner's follow-up ids).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from loadgen.plan.jobs import Job, JobBook
from loadgen.record.jobs import JobRecorder

__all__ = ["JobFlow", "SendRequest"]

SendRequest = Callable[[int, int, int, bool], None]
"""(query id, scheduled ns, prompt index, measured): register the query and send it."""


@dataclass(slots=True)
class _Running:
    """One job in progress."""

    job: Job
    start_ns: int  # its arrival: the scheduled start its time counts from
    measured: bool
    first_id: int | None  # the arrival's query id, until the first request takes it
    step: int = 0  # the step in flight (or due)
    waiting: int = 0  # requests of that step still in flight
    last_done_ns: int = 0
    failed: bool = False


class JobFlow:
    """The open jobs of one run, and the steps scheduled and not yet sent."""

    def __init__(self, book: JobBook, call_at_ns: Callable[[int, Callable[[], None]], None],
                 send: SendRequest, new_id: Callable[[], int], stopped: Callable[[], bool],
                 recorder: JobRecorder) -> None:
        self.book = book
        self.recorder = recorder
        self._call_at_ns, self._send, self._new_id = call_at_ns, send, new_id
        self._stopped = stopped
        self._flight: dict[int, _Running] = {}  # request in flight -> its job
        self.pending = 0
        """Steps scheduled and not yet sent (the drain waits for them)."""

    def begin(self, query_id: int, scheduled_ns: int, sample: int, measured: bool) -> None:
        """A job arrives, due at `scheduled_ns` (`query_id` its first request's id)."""
        run = _Running(self.book.job(sample), scheduled_ns, measured, query_id)
        if measured:
            self.recorder.started()
        if run.job.steps[0].think_ns:
            self._due_step(run, scheduled_ns)
        else:  # from the issue loop, on time: sent at once
            self._send_step(run, scheduled_ns)

    def ended(self, query_id: int, done_ns: int, ok: bool) -> None:
        """Collector hook: a request left flight; the last of a step starts the next."""
        run = self._flight.pop(query_id, None)
        if run is None:
            return
        run.waiting -= 1
        run.last_done_ns = max(run.last_done_ns, done_ns)
        if not ok and not run.failed:
            run.failed = True
            if run.measured:
                self.recorder.failed()
        if run.waiting or run.failed:
            return
        run.step += 1
        if run.step < len(run.job.steps):
            self._due_step(run, run.last_done_ns)
        elif run.measured:
            self.recorder.finished(run.last_done_ns - run.start_ns)

    def _due_step(self, run: _Running, after_ns: int) -> None:
        """Send the run's current step on the timers, its gap after `after_ns` (never from
        inside the SUT's completion call; nothing once the run stops)."""
        if self._stopped():
            return
        due = after_ns + run.job.steps[run.step].think_ns
        self.pending += 1
        self._call_at_ns(due, lambda: self._due(run, due))

    def _due(self, run: _Running, due_ns: int) -> None:
        self.pending -= 1
        if not self._stopped():
            self._send_step(run, due_ns)

    def _send_step(self, run: _Running, due_ns: int) -> None:
        """Every request of the step, registered first (a SUT may answer at once), then sent."""
        prompts = run.job.steps[run.step].prompts
        ids = []
        for _ in prompts:
            query_id = run.first_id if run.first_id is not None else self._new_id()
            run.first_id = None
            ids.append(query_id)
            self._flight[query_id] = run
        run.waiting = len(prompts)
        for query_id, prompt in zip(ids, prompts, strict=True):
            self._send(query_id, due_ns, prompt, run.measured)
