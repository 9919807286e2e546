"""Every error loadgen raises on purpose.

    LoadgenError
     ├── SettingsError      bad test definition or override; lists every problem
     ├── SutSpecError       a --sut SPEC that names no known SUT or has bad keys
     ├── SutError           the system under test failed to start or stop
     └── ResultError        a saved result that cannot be read back
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["LoadgenError", "ResultError", "SettingsError", "SutError", "SutSpecError", "suggest"]


class LoadgenError(Exception):
    """Base of every error loadgen raises on purpose."""


class SettingsError(LoadgenError):
    """A test definition is invalid; `problems` holds one message per bad key."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("invalid settings:\n  " + "\n  ".join(self.problems))


class SutSpecError(LoadgenError):
    """A --sut SPEC could not be understood."""


class SutError(LoadgenError):
    """The system under test could not be started or stopped."""


class ResultError(LoadgenError):
    """A saved result is missing or malformed."""


def suggest(word: str, choices: Iterable[str]) -> str:
    """'; did you mean NAME?' for the closest of `choices` to a mistyped `word`, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]}?" if close else ""
