"""Every error loadgen raises on purpose.

    LoadgenError
     ├── SettingsError      bad test definition or override; lists every problem
     ├── SutSpecError       a --sut SPEC that names no known SUT or has bad keys
     ├── SutError           the system under test failed to start or stop
     └── ResultError        a saved result that cannot be read back
"""

from __future__ import annotations

__all__ = ["LoadgenError", "ResultError", "SettingsError", "SutError", "SutSpecError"]


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
