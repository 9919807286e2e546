"""The engine: walks the plan, stamps times, hands queries to the SUT.

Only this module reads the clock or awaits. Open loop (Server) issues each
query at its scheduled time whatever is still in flight; closed loop
(SingleStream, MultiStream, `arrival = "closed"`) issues the next query when
one completes, scheduled at that completion's stamped time. asyncio's timers
are about 1 ms coarse, so waits end `SPIN_WINDOW_NS` early and the rest is a
yielding spin; the SUT's own timers (`call_at_ns`) are served the same way, and so
are the later turns of multi-turn sessions (`engine.conversations`), each sent a think
time after the previous answer; the drain waits for those still pending.

Bulk work is kept off issue times. The schedule is planned ahead before the
clock starts (up to `PLAN_AHEAD_VALUES` offsets and sample indices; a longer
run plans the rest in slack of at least `PLAN_SLACK_NS`). The recorders'
buffers are flushed a slice at a time in slack of at least `TIDY_SLACK_NS`;
only a buffer that fills up in a run with no slack flushes on the spot.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
import time
from collections.abc import Callable, Iterator

import numpy as np

from loadgen.adapters.base import SystemUnderTest
from loadgen.adapters.tokens import Turn
from loadgen.engine.conversations import FOLLOW_UP_IDS, Conversations
from loadgen.engine.jobs import JobFlow
from loadgen.plan.jobs import JobBook
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import IssueMode
from loadgen.plan.turns import session_shape
from loadgen.record.collect import Collector
from loadgen.record.glance import glance
from loadgen.record.progress import Progress
from loadgen.record.tally import RunTimes

__all__ = ["PLAN_AHEAD_VALUES", "PROGRESS_EVERY_NS", "Runner"]

SPIN_WINDOW_NS = 2_000_000
BUSY_WAIT_NS = 10_000
SLEEP_OVERSHOOT_NS = 150_000  # time.sleep wakes ~80-100 us late here (p99 ~140 us)
TIDY_SLACK_NS = 300_000  # a buffer slice takes ~20 us warm, up to ~300 us when cold
PLAN_SLACK_NS = 300_000  # a chunk of the plan takes ~50 us, up to ~250 us when cold
PLAN_AHEAD_VALUES = 1 << 22  # int64s planned ahead (32 MB): all of a 2M-query Server run
YIELD_EVERY = 64
PROGRESS_EVERY_NS = 250_000_000  # a live display redraws a few times a second
LOG_FLUSH_EVERY_NS = 2_000_000_000
_FAR_NS = 50_000_000
ABANDONED = "still in flight when a second interrupt stopped the drain"


class Runner:
    """One run's issuing state; also the `Timers` service handed to the SUT."""

    def __init__(
        self,
        plan: RunPlan,
        sut: SystemUnderTest,
        collector: Collector,
        offsets: Iterator[np.ndarray] | None,
        samples: Iterator[np.ndarray],
        progress: Callable[[Progress], None] | None = None,
        ids: Iterator[int] | None = None,
        release_gil: bool = False,
        share: tuple[int, int] = (0, 1),
        glance_every: int = 1,
    ) -> None:
        self.plan = plan
        self.sut = sut
        self._release_gil = release_gil or bool(getattr(sut, "shares_gil", False))
        self.collector = collector
        self._offsets = offsets
        self._samples = samples
        self._progress = progress
        self._glance_every = glance_every  # progress ticks a glance (the rest carry None)
        self._ticks = 0
        self._timers: list[tuple[int, int, Callable[[], None]]] = []
        self._timer_seq = itertools.count()
        self._ready: collections.deque[int] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._stop = False
        self._abandon = False
        self._closed = False
        self._ids = itertools.count() if ids is None else ids  # a share: its global ids
        self._start_ns = 0
        self._next_progress_ns = 0
        self._next_flush_ns = 0
        self._t0 = 0  # open loop: the clock origin of the plan's offsets
        self._ahead: collections.deque[tuple[np.ndarray, np.ndarray]] = collections.deque()
        self._ahead_queries = 0
        self._ahead_limit = PLAN_AHEAD_VALUES // (1 + plan.samples_per_query)
        self.plan_ns = 0  # time spent planning the schedule (its cost shows in the result)
        shape = session_shape(plan.settings)
        self._sessions: Conversations | None = None
        self._jobs: JobFlow | None = None
        index, count = share  # load process `index` of `count`: its own follow-up ids
        self._turn_ids = itertools.count(FOLLOW_UP_IDS + index, count)
        if shape is not None and plan.open_loop:  # multi-turn: later turns on the timers
            self._sessions = Conversations(shape, sut, self.call_at_ns, self._send_turn,
                                           lambda: self._stop,
                                           getattr(plan.prompts, "conversations", None))
            collector.on_end = self._sessions.ended
        if isinstance(plan.prompts, JobBook) and plan.open_loop:  # agentic jobs: steps too
            assert collector.jobs is not None
            self._jobs = JobFlow(plan.prompts, self.call_at_ns, self._send_request,
                                 lambda: next(self._turn_ids), lambda: self._stop,
                                 collector.jobs)
            collector.on_end = self._jobs.ended

    # -- services for the SUT and the collector ---------------------------------------------

    def call_at_ns(self, when_ns: int, callback: Callable[[], None]) -> None:
        """Run `callback` once the clock reaches `when_ns` (served by the issue loop)."""
        heapq.heappush(self._timers, (when_ns, next(self._timer_seq), callback))
        self._wake()

    def query_finished(self, done_ns: int) -> None:
        """Collector hook: a query left flight; closed loop issues the next one."""
        if self._closed:
            self._ready.append(done_ns)
        self._wake()

    @property
    def stopping(self) -> bool:
        """Whether the run was interrupted (it issues no more)."""
        return self._stop

    def interrupt(self) -> None:
        """Stop issuing now (Ctrl-C or SIGTERM); the run drains and reports what it has. A
        second interrupt stops the drain too: what is still in flight is abandoned."""
        self._abandon = self._stop
        self._stop = True
        self._wake()

    # -- the run -----------------------------------------------------------------------------

    async def run(self, start_at_ns: int | None = None) -> RunTimes:
        """Issue the whole plan, drain, and return the run's times.

        With `start_at_ns` (a `perf_counter_ns` time, shared by several load
        processes on one host) the schedule starts then, not now.
        """
        plan = self.plan
        clock = time.perf_counter_ns
        self.plan_ahead()
        if start_at_ns is not None:
            self._start_ns, self._next_progress_ns = start_at_ns, start_at_ns + PROGRESS_EVERY_NS
            self._next_flush_ns = start_at_ns + LOG_FLUSH_EVERY_NS
            await self._pump(start_at_ns, _never)
        self._start_ns = t0 = clock() if start_at_ns is None else start_at_ns
        self._next_progress_ns = t0 + PROGRESS_EVERY_NS
        self._next_flush_ns = t0 + LOG_FLUSH_EVERY_NS
        measure_start = t0 + plan.warmup_ns
        self.collector.started(t0, measure_start)
        self._closed = not plan.open_loop
        if self._closed:
            await self._issue_closed(t0, measure_start)
        else:
            await self._issue_open(t0, measure_start)
        issue_end = clock()
        drain_until = issue_end + plan.drain_timeout_ns
        await self._pump(drain_until, self._drained_or_abandoned, stoppable=False)
        end = clock()
        unfinished = 0
        if self.collector.in_flight:
            unfinished = self.collector.abandon(end, detail=ABANDONED) if self._abandon \
                else self.collector.abandon(end)
        return RunTimes(t0, measure_start, issue_end, end, self._stop, unfinished)

    @property
    def first_offset_ns(self) -> int | None:
        """The first planned query's offset from the start (None: nothing on a schedule)."""
        for offsets, _ in self._ahead:
            if offsets.size:
                return int(offsets[0])
        return None

    def plan_ahead(self) -> None:
        """Plan the open-loop schedule ahead, up to the limit (call before the clock starts)."""
        while self._ahead_queries < self._ahead_limit and self._plan_chunk():
            pass

    async def _issue_open(self, t0: int, measure_start: int) -> None:
        clock = time.perf_counter_ns
        in_a_row = 0
        self._t0 = t0
        while (chunk := self._take_chunk()) is not None:
            dues, rows = chunk
            for i, due in enumerate(dues):
                if self._stop:
                    return
                now = clock()
                if due > now:
                    await self._pump(due, _never)
                    if self._stop:  # interrupted while waiting: not due yet, not issued
                        return
                    in_a_row = 0
                elif in_a_row >= YIELD_EVERY:
                    self._housekeeping(now)
                    await asyncio.sleep(0)
                    in_a_row = 0
                elif self._timers and self._timers[0][0] <= now:
                    self._run_timers(now)
                self._issue(due, rows[i], due >= measure_start)
                in_a_row += 1

    async def _issue_closed(self, t0: int, measure_start: int) -> None:
        p = self.plan
        bounded = p.issue_mode is IssueMode.CLOSED
        rows: Iterator[np.ndarray] = (iter([next(self._samples)[0]])
                                      if p.issue_mode is IssueMode.OFFLINE else self._samples_rows())
        min_end = measure_start + p.min_duration_ns
        max_end = measure_start + p.max_duration_ns if p.max_duration_ns else None
        measured = 0
        self._ready.extend([t0] * p.concurrency)
        while True:
            while self._ready:
                scheduled = self._ready.popleft()
                is_measured = scheduled >= measure_start
                if bounded and is_measured and self._closed_loop_done(scheduled, measured,
                                                                      min_end, max_end):
                    return
                row = next(rows, None)
                if row is None or self._stop:
                    return
                self._issue(scheduled, row, is_measured)
                measured += is_measured
            await self._pump(None, self._can_issue)
            if self._stop:
                return

    def _drained(self) -> bool:
        """Nothing in flight, and no session's next turn or job's next step waiting."""
        return self.collector.in_flight == 0 and not (self._sessions and self._sessions.pending) \
            and not (self._jobs and self._jobs.pending)

    def _drained_or_abandoned(self) -> bool:
        """Drained, or a second interrupt said not to wait any longer."""
        return self._abandon or self._drained()

    def _can_issue(self) -> bool:
        """A slot is free, or nothing is in flight that could free one."""
        return bool(self._ready) or self.collector.in_flight == 0

    def _take_chunk(self) -> tuple[list[int], np.ndarray] | None:
        """The next chunk of the plan: due times (perf_counter ns) and sample rows."""
        if not self._ahead and not self._plan_chunk():
            return None
        offsets, rows = self._ahead.popleft()
        self._ahead_queries -= offsets.size
        return (offsets + self._t0).tolist(), rows

    def _plan_chunk(self) -> bool:
        """Plan one more chunk of the open-loop schedule; False once it is spent."""
        began = time.perf_counter_ns()
        offsets = None if self._offsets is None else next(self._offsets, None)
        if offsets is not None:
            self._ahead.append((offsets, next(self._samples)))
            self._ahead_queries += offsets.size
        self.plan_ns += time.perf_counter_ns() - began
        if offsets is None:
            self._offsets = None
            return False
        return True

    def _tidy(self, slack_ns: int) -> bool:
        """Do one piece of bulk work that fits the slack; False when there is none."""
        if slack_ns > TIDY_SLACK_NS and self.collector.tidy():
            return True
        return (slack_ns > PLAN_SLACK_NS and self._offsets is not None
                and self._ahead_queries < self._ahead_limit and self._plan_chunk())

    def _samples_rows(self) -> Iterator[np.ndarray]:
        for chunk in self._samples:
            yield from chunk

    def _closed_loop_done(self, scheduled: int, measured: int, min_end: int,
                          max_end: int | None) -> bool:
        """Both minimums met (judged at the would-be query's scheduled time), or a maximum."""
        p = self.plan
        if measured >= p.min_query_count and scheduled >= min_end:
            return True
        if max_end is not None and scheduled >= max_end:
            return True
        return bool(p.max_query_count) and measured >= p.max_query_count

    def _issue(self, scheduled: int, samples: np.ndarray, measured: bool) -> None:
        query_id = next(self._ids)
        if self._jobs is not None:  # the job registers its requests as it sends them
            self._jobs.begin(query_id, scheduled, int(samples[0]), measured)
            return
        sent = time.perf_counter_ns()
        self.collector.issued_query(query_id, scheduled, sent, len(samples), measured)
        if self._sessions is None:
            self.sut.issue(query_id, samples)
        else:
            self._sessions.begin(query_id, int(samples[0]), measured)

    def _send_turn(self, scheduled: int, sample: int, turn: Turn, measured: bool) -> None:
        """A session's next turn, due at `scheduled` (run from the timers, so on time)."""
        assert self._sessions is not None
        query_id = next(self._turn_ids)
        self.collector.issued_query(query_id, scheduled, time.perf_counter_ns(), 1, measured)
        self._sessions.sent(query_id, sample, turn, measured)

    def _send_request(self, query_id: int, scheduled: int, prompt: int, measured: bool) -> None:
        """One request of a job's step, due at `scheduled`."""
        self.collector.issued_query(query_id, scheduled, time.perf_counter_ns(), 1, measured)
        self.sut.issue(query_id, np.array([prompt], dtype=np.int64))

    # -- waiting -----------------------------------------------------------------------------

    async def _pump(self, until_ns: int | None, satisfied: Callable[[], object],
                    stoppable: bool = True) -> None:
        """Serve timers and expiries until `satisfied()`, the deadline, or a stop."""
        clock = time.perf_counter_ns
        while True:
            now = clock()
            self._housekeeping(now)
            if satisfied() or (stoppable and self._stop):
                return
            if until_ns is not None and now >= until_ns:
                return
            target = until_ns
            if self._timers and (target is None or self._timers[0][0] < target):
                target = self._timers[0][0]
            if target is None:  # nothing due: sleep until woken, never spin (spinning holds
                if not self._tidy(_FAR_NS):  # the GIL an in-process SUT's threads need)
                    await self._sleep(_FAR_NS / 1e9)
                continue
            remaining = target - now
            if remaining > TIDY_SLACK_NS and self._tidy(remaining):
                continue
            if remaining > SPIN_WINDOW_NS:
                await self._sleep((remaining - SPIN_WINDOW_NS) / 1e9)
            elif self._release_gil:  # file what completed, then wait without the GIL
                await asyncio.sleep(0)
                _sleep_until(target)
            elif remaining > BUSY_WAIT_NS:
                await asyncio.sleep(0)
            else:
                while clock() < target:
                    pass

    def _housekeeping(self, now: int) -> None:
        if self._timers and self._timers[0][0] <= now:
            self._run_timers(now)
        if self.collector.query_timeout_ns:
            self.collector.expire(now)
        if now >= self._next_progress_ns:
            self._next_progress_ns = now + PROGRESS_EVERY_NS
            c = self.collector
            if c.log is not None and now >= self._next_flush_ns:
                self._next_flush_ns = now + LOG_FLUSH_EVERY_NS
                c.log.flush()
            if self._progress is None:
                return
            self._ticks += 1
            seen = glance(c) if (self._ticks - 1) % self._glance_every == 0 else None
            self._progress(Progress(now - self._start_ns, c.issued, c.finished, c.in_flight,
                                    sum(c.errors_by_kind.values()), seen))

    def _run_timers(self, now: int) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            heapq.heappop(timers)[2]()

    async def _sleep(self, seconds: float) -> None:
        loop = asyncio.get_running_loop()
        waiter = self._waiter = loop.create_future()
        handle = loop.call_later(seconds, _resolve, waiter)
        try:
            await waiter
        finally:
            handle.cancel()
            self._waiter = None

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


def _sleep_until(target_ns: int) -> None:
    """Block until `target_ns` holding the GIL as little as possible: sleep, then yield it.

    For SUTs whose threads share this process: a spinning issue loop holds the GIL they
    need between torch ops (measured: two MLP workers fell from ~150k to ~2k samples/s
    beside a spinning thread, and ran at ~125k beside this wait, which wakes ~45 us late
    at the median).
    """
    clock = time.perf_counter_ns
    coarse = target_ns - clock() - SLEEP_OVERSHOOT_NS
    if coarse > 0:
        time.sleep(coarse / 1e9)
    while clock() < target_ns:
        time.sleep(0)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def _never() -> bool:
    return False
