"""The `loadgen` command: parse, build settings and SUT, call the library, report, exit.

The entry point is `loadgen.cli.main.main`; this package's `__init__` imports nothing, so its
modules can read their siblings off it (`from loadgen.cli import helptext`) without a cycle.
"""
