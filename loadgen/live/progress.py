"""Progress lines on long runs: one line on stderr every `PROGRESS_EVERY_NS`."""

from __future__ import annotations

import sys

from loadgen.engine.runner import Progress

__all__ = ["print_progress"]


def print_progress(p: Progress) -> None:
    """A one-line progress report on stderr."""
    rate = p.finished / (p.elapsed_ns / 1e9) if p.elapsed_ns else 0.0
    print(f"[{p.elapsed_ns / 1e9:7.1f}s] issued {p.issued}  done {p.finished}  "
          f"in flight {p.in_flight}  errors {p.errors}  ({rate:.0f}/s)", file=sys.stderr)
