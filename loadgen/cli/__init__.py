"""The `loadgen` command: parse, build settings and SUT, call the library, report, exit."""

from loadgen.cli.main import main

__all__ = ["main"]
