"""The latency bounds a token run is held to, in ns, derived once from its settings.

Two sets: MLPerf's token-mode targets (`ttft_latency_ms`, `tpot_latency_ms`,
judged at p99 with early stopping on each) and the goodput SLOs (a request is
good when it meets every bound set; 0 = that bound is not set).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["NO_TOKEN_SLOS", "TokenSlos"]


@dataclass(frozen=True, slots=True)
class TokenSlos:
    """Per-request bounds in ns; 0 = not set.

    `itl_ns` bounds every gap between two tokens of a request (its longest stall).
    """

    ttft_ns: int = 0
    tpot_ns: int = 0
    itl_ns: int = 0
    e2e_ns: int = 0

    @property
    def any(self) -> bool:
        """Whether any bound is set."""
        return bool(self.ttft_ns or self.tpot_ns or self.itl_ns or self.e2e_ns)

    def met(self, ttft_ns: int, tpot_ns: int | None, stall_ns: int, e2e_ns: int) -> bool:
        """Whether one finished request meets every bound set (no TPOT: one-token output)."""
        return ((not self.ttft_ns or ttft_ns <= self.ttft_ns)
                and (not self.tpot_ns or tpot_ns is None or tpot_ns <= self.tpot_ns)
                and (not self.itl_ns or stall_ns <= self.itl_ns)
                and (not self.e2e_ns or e2e_ns <= self.e2e_ns))

    def as_dict(self) -> dict[str, Any]:
        """The bounds set, in ms, keyed ttft, tpot, itl, e2e."""
        return {name: getattr(self, f"{name}_ns") / 1e6
                for name in ("ttft", "tpot", "itl", "e2e") if getattr(self, f"{name}_ns")}


NO_TOKEN_SLOS = TokenSlos()
"""No bound set."""
