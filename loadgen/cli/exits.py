"""The exit codes of the `loadgen` command, one table for every subcommand."""

from __future__ import annotations

__all__ = ["EXIT_ERROR", "EXIT_INVALID", "EXIT_MISMATCH", "EXIT_USAGE", "EXIT_VALID"]

EXIT_VALID = 0  # the run is VALID (find-peak: some rate passed)
EXIT_INVALID = 1  # the run is INVALID (find-peak: no rate passed)
EXIT_USAGE = 2  # bad usage, settings or SUT spec
EXIT_ERROR = 3  # the run failed (the SUT could not start)
EXIT_MISMATCH = 4  # `compare`: A and B differ in more than the variable compared
