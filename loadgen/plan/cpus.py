"""A list of CPU cores as Linux writes one (`0-3,8,10-11`), for pinning load processes."""

from __future__ import annotations

__all__ = ["parse_cpus"]


def parse_cpus(text: str) -> list[int]:
    """The cores of a list like `0-3,8` in the order given, each once (ValueError if bad)."""
    out: list[int] = []
    for part in text.replace(" ", "").split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(f"not a core or a range of cores: {part!r}")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"a range must go up: {part!r}")
        out += [c for c in range(first, last + 1) if c not in out]
    return out
