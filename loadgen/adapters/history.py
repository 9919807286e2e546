"""The history a streaming SUT keeps for each multi-turn session: earlier prompts and answers.

A turn's request carries the session so far: each earlier turn's new message and the
answer it got, then the turn's own message. `Histories` keeps them by session id, from
a turn's end until the session's next turn is sent; the last turn, or a failed one
(the session ends there), drops them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from loadgen.adapters.tokens import Prompt, Turn

__all__ = ["Exchanged", "Histories", "transcript"]


@dataclass(frozen=True, slots=True)
class Exchanged:
    """One earlier turn: the user's message and the answer (its text and tokens)."""

    prompt: Prompt
    answer: str
    answer_tokens: int


@dataclass(slots=True)
class Histories:
    """Each open session's earlier turns, by session id."""

    sessions: dict[int, list[Exchanged]] = field(default_factory=dict)

    def before(self, turn: Turn) -> list[Exchanged]:
        """The turns the session had before `turn` (none for a first turn)."""
        return [] if turn.index == 1 else self.sessions.get(turn.session, [])

    def input_tokens(self, turn: Turn, prompt: Prompt) -> int:
        """The turn's whole input: every earlier message and answer, then its own message."""
        return prompt.input_tokens + sum(e.prompt.input_tokens + e.answer_tokens
                                         for e in self.before(turn))

    def ended(self, turn: Turn, exchanged: Exchanged | None) -> None:
        """A turn ended: keep it for the next one (`None`: it failed, the session is over)."""
        if exchanged is None or turn.last:
            self.sessions.pop(turn.session, None)
            return
        self.sessions.setdefault(turn.session, []).append(exchanged)


def transcript(history: Sequence[Exchanged], prompt: Prompt) -> str:
    """A completions-style prompt of a turn: every earlier message and answer, concatenated,
    then its own message."""
    return "".join(e.prompt.text + e.answer for e in history) + prompt.text
