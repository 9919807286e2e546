"""`trace_format`: which loader reads `trace_file` (`auto` is the generic CSV/JSONL of `tracefile`)."""

from __future__ import annotations

from pathlib import Path

from loadgen.plan.traces.azure import read_azure
from loadgen.plan.traces.burstgpt import read_burstgpt
from loadgen.plan.traces.mooncake import read_mooncake
from loadgen.plan.traces.rows import TraceRows

__all__ = ["NAMED_FORMATS", "TRACE_FORMATS", "read_named_trace"]

NAMED_FORMATS = ("mooncake", "azure", "burstgpt")
TRACE_FORMATS = ("auto", *NAMED_FORMATS)


def read_named_trace(path: str | Path, trace_format: str, block_tokens: int) -> TraceRows:
    """The rows of a trace in one of `NAMED_FORMATS`."""
    if trace_format == "mooncake":
        return read_mooncake(path, block_tokens)
    if trace_format == "azure":
        return read_azure(path)
    if trace_format == "burstgpt":
        return read_burstgpt(path)
    raise ValueError(f"trace_format {trace_format!r} is not one of {', '.join(NAMED_FORMATS)}")
