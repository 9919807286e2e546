"""Reading LoadGen's log files back: summary key/values and detail `:::MLLOG` entries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

INTERNAL = ("loadgen_", "logger_", "get_sut_name_duration_ns")
"""Detail keys about LoadGen's own build and logger, which no reader of results uses."""


def detail(path: Path) -> dict[str, Any]:
    """The detail log's entries by key (a repeated key keeps its last value)."""
    out = {}
    for line in path.read_text().splitlines():
        assert line.startswith(":::MLLOG "), line
        entry = json.loads(line[len(":::MLLOG "):])
        out[entry["key"]] = entry["value"]
    return out


def summary(path: Path) -> dict[str, str]:
    """The summary's `name : value` lines (the first of each name)."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.partition(":")
        if sep and name.strip() and not line.startswith(" *"):
            out.setdefault(name.strip(), value.strip())
    return out


def early_stopping(path: Path) -> list[str]:
    """The summary's early-stopping lines (without the estimate values)."""
    lines = path.read_text().splitlines()
    if "Early Stopping Result:" not in lines:
        return []
    start = lines.index("Early Stopping Result:") + 1
    block = []
    for line in lines[start:]:
        if not line.strip():
            break
        block.append(line.split("estimate:")[0])
    return block
