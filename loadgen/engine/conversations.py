"""Multi-turn sessions started open loop: each later turn a think time after the last answer.

A session starts at an arrival of the plan (its first turn is that query); its turn
count is drawn then (`plan.turns.SessionDraws`). When a turn's answer ends well at
`done`, the next turn is scheduled at `done + think time` on the engine's precise
timers and sent then, timed from that scheduled moment like any query (a late send
stays in its TTFT). A failed turn ends its session. Turn k of a session asks sample
`s + k - 1` of the prompts (s: the session's sample), after the session's history,
which the SUT keeps (`issue_turn`); with a dataset's `conversations` (`dataset_turns`),
sample s starts conversation s mod conversations, (first prompt, turns): turn k asks
its first prompt + k - 1. Later turns take query ids from `FOLLOW_UP_IDS` up.
"""

from __future__ import annotations

from collections.abc import Callable

from loadgen.adapters.base import SystemUnderTest
from loadgen.adapters.tokens import Turn
from loadgen.errors import SutError
from loadgen.plan.turns import SessionDraws, SessionShape

__all__ = ["FOLLOW_UP_IDS", "Conversations", "SendTurn"]

FOLLOW_UP_IDS = 1 << 48

SendTurn = Callable[[int, int, Turn, bool], None]
"""(scheduled ns, sample index, turn, measured): register the query and send the turn."""


class Conversations:
    """The open sessions of one run, and the follow-up turns scheduled and not yet sent."""

    def __init__(self, shape: SessionShape, sut: SystemUnderTest,
                 call_at_ns: Callable[[int, Callable[[], None]], None], send: SendTurn,
                 stopped: Callable[[], bool],
                 conversations: tuple[tuple[int, int], ...] | None = None) -> None:
        issue_turn = getattr(sut, "issue_turn", None)
        if issue_turn is None:
            raise SutError(f"SUT {sut.name!r} cannot hold multi-turn sessions (turns): it "
                           "takes no issue_turn")
        self.issue_turn: Callable[[int, int, Turn], None] = issue_turn
        self._draws = SessionDraws(shape)
        self._conversations = conversations
        self._call_at_ns, self._send, self._stopped = call_at_ns, send, stopped
        self._open: dict[int, tuple[Turn, int, bool]] = {}  # turn in flight -> its session
        self.pending = 0
        """Follow-up turns scheduled and not yet sent (the drain waits for them)."""

    def begin(self, query_id: int, sample: int, measured: bool) -> None:
        """Send a new session's first turn (query `query_id`, already registered)."""
        if self._conversations is None:
            turn = Turn(query_id, 1, self._draws.turns())
        else:  # a dataset's conversation: its own turns, from its first prompt
            sample, count = self._conversations[sample % len(self._conversations)]
            turn = Turn(query_id, 1, count)
        if not turn.last:
            self._open[query_id] = (turn, sample, measured)
        self.issue_turn(query_id, sample, turn)

    def sent(self, query_id: int, sample: int, turn: Turn, measured: bool) -> None:
        """Send a follow-up turn (query `query_id`, already registered)."""
        if not turn.last:
            self._open[query_id] = (turn, sample, measured)
        self.issue_turn(query_id, sample + turn.index - 1, turn)

    def ended(self, query_id: int, done_ns: int, ok: bool) -> None:
        """Collector hook: a query left flight; a session's turn that ended well schedules
        the next turn a think time later."""
        entry = self._open.pop(query_id, None)
        if entry is None or not ok or self._stopped():
            return
        turn, sample, measured = entry
        due = done_ns + self._draws.think_ns()
        following = Turn(turn.session, turn.index + 1, turn.count)
        self.pending += 1
        self._call_at_ns(due, lambda: self._due(due, sample, following, measured))

    def _due(self, due_ns: int, sample: int, turn: Turn, measured: bool) -> None:
        self.pending -= 1
        if not self._stopped():
            self._send(due_ns, sample, turn, measured)
