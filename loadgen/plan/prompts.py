"""A token workload's requests: `Prompt` and the `PromptSource` that hands them out by index.

Defined here, in the plan stage, because the plan builds the prompts
(`plan.workload`); `adapters.tokens` re-exports both for the SUTs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["Prompt", "PromptSource", "Turn"]


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request of a token workload."""

    text: str
    input_tokens: int
    """Length in tokens of the workload's tokenizer (what was asked for)."""
    max_tokens: int
    """Output length asked for; with `fixed_output` the server is told to ignore EOS."""
    fixed_output: bool = False
    extra: Mapping[str, Any] = field(default_factory=dict)
    """Request fields the workload adds (for example a shared-prefix group)."""


class PromptSource(Protocol):
    """The run's prompts, by sample index.

    The run's built sources also carry `tokenizer` (the `tokenizer` setting that counted
    their lengths); a streaming adapter counts with it unless its spec names its own.
    """

    def prompt(self, index: int) -> Prompt:
        """The prompt for one sample index of the run's library."""


@dataclass(frozen=True, slots=True)
class Turn:
    """Which turn of a multi-turn session a request is (`engine.conversations` sends them)."""

    session: int
    """The session's id: the query id of its first turn."""
    index: int
    """1 for the session's first turn, 2 for the next, ..."""
    count: int
    """Turns in the session."""

    @property
    def last(self) -> bool:
        """Whether no turn follows (the SUT can forget the session's history)."""
        return self.index >= self.count
