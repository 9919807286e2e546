"""A queueing simulator SUT, so results can be checked against theory.

`servers` identical servers take samples first come, first served; a sample's
service time is constant, exponential or lognormal with the given mean. Each
sample arrives when it is sent, and finishes at a time computed exactly from
the queue (not from when a timer fires), so an M/D/1 or M/M/c run matches the
formulas up to the harness's own issue lag. The engine's precise timers deliver
the completion at that time.

Fault keys: `error_rate` (that fraction of queries fail, kind ``sim_error``) and
`stall_after_s` (from then on no query is answered).
"""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.adapters.base import CompletionSink, Timers
from loadgen.errors import SutSpecError, suggest

__all__ = ["ServiceTime", "SimSut", "parse_duration_ns", "service_draws"]

_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(ns|us|µs|ms|s)\s*$")
_DISTRIBUTIONS = ("const", "exp", "lognormal")


def parse_duration_ns(text: str) -> int:
    """'2ms' -> 2_000_000; units ns, us, ms, s."""
    match = _DURATION.match(text)
    if not match:
        raise SutSpecError(f"{text!r} is not a duration like 2ms, 500us or 1.5s")
    return round(float(match.group(1)) * _UNITS[match.group(2)])


@dataclass(frozen=True, slots=True)
class ServiceTime:
    """A service-time distribution: `kind` in const/exp/lognormal, mean in ns."""

    kind: str
    mean_ns: int
    sigma: float = 0.5

    @classmethod
    def parse(cls, text: str) -> ServiceTime:
        """'const:2ms', 'exp:2ms', 'lognormal:2ms' or 'lognormal:2ms:0.8' (sigma)."""
        kind, _, rest = text.partition(":")
        if kind not in _DISTRIBUTIONS or not rest:
            raise SutSpecError(f"service={text!r}: expected const:, exp: or lognormal: and a mean")
        mean, _, sigma = rest.partition(":")
        try:
            value = cls(kind, parse_duration_ns(mean), float(sigma) if sigma else 0.5)
        except ValueError:
            raise SutSpecError(f"service={text!r}: sigma must be a number") from None
        if value.mean_ns <= 0 or value.sigma < 0:
            raise SutSpecError(f"service={text!r}: mean must be positive, sigma not negative")
        return value

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        """`count` service times in ns (float)."""
        if self.kind == "const":
            return np.full(count, float(self.mean_ns))
        if self.kind == "exp":
            return rng.exponential(self.mean_ns, count)
        mu = np.log(self.mean_ns) - self.sigma**2 / 2
        return rng.lognormal(mu, self.sigma, count)


def service_draws(service: ServiceTime, rng: np.random.Generator) -> Iterator[float]:
    """The endless stream of service times (ns) a sim draws, in the order it serves samples.

    Drawn in blocks of 4096 from `rng`; a sim with seed s and no error rate
    consumes exactly `service_draws(service, np.random.default_rng(s))`.
    """
    while True:
        yield from service.draw(rng, 4096).tolist()


class SimSut:
    """An M/G/c first-come-first-served queue with exact completion stamps."""

    name = "sim"

    def __init__(self, service: ServiceTime, servers: int = 1, seed: int = 0,
                 error_rate: float = 0.0, stall_after_s: float = 0.0) -> None:
        if servers < 1:
            raise SutSpecError("servers: must be at least 1")
        if not 0 <= error_rate <= 1:
            raise SutSpecError("error_rate: must be in [0, 1]")
        if stall_after_s < 0:
            raise SutSpecError("stall_after_s: must not be negative")
        self.service = service
        self.servers = servers
        self.error_rate = error_rate
        self.stall_after_s = stall_after_s
        self.seed = seed
        self._rng = np.random.default_rng(seed)
        self._free_at = [0] * servers
        self._draws = service_draws(service, self._rng)
        self._sink: CompletionSink | None = None
        self._timers: Timers | None = None
        self._stall_at_ns: int | None = None

    @classmethod
    def from_options(cls, options: dict[str, str]) -> SimSut:
        """Build from `sim:key=value,...` options."""
        known = {"service", "servers", "seed", "error_rate", "stall_after_s"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise SutSpecError(f"sim: unknown key {unknown[0]!r}{suggest(unknown[0], known)}; "
                               f"known: {', '.join(sorted(known))}")
        try:
            return cls(
                ServiceTime.parse(options.get("service", "const:1ms")),
                servers=int(options.get("servers", "1")),
                seed=int(options.get("seed", "0")),
                error_rate=float(options.get("error_rate", "0")),
                stall_after_s=float(options.get("stall_after_s", "0")),
            )
        except ValueError as exc:
            raise SutSpecError(f"sim: bad value: {exc}") from None

    async def start(self, sink: CompletionSink, timers: Timers) -> None:
        self._sink, self._timers = sink, timers
        if self.stall_after_s:
            self._stall_at_ns = time.perf_counter_ns() + int(self.stall_after_s * 1e9)

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        assert self._sink is not None and self._timers is not None, "issue before start"
        arrival = time.perf_counter_ns()
        if self._stall_at_ns is not None and arrival >= self._stall_at_ns:
            return
        free_at = self._free_at
        sample_done = []
        for _ in range(len(sample_indices)):
            start = max(arrival, free_at[0])
            done = start + int(next(self._draws))
            heapq.heapreplace(free_at, done)
            sample_done.append(done)
        finish = max(sample_done)
        sink = self._sink
        if self.error_rate and self._rng.random() < self.error_rate:
            self._timers.call_at_ns(finish, lambda: sink.failed(
                query_id, finish, "sim_error", f"simulated failure (error_rate={self.error_rate:g})"))
        elif len(sample_done) == 1:
            self._timers.call_at_ns(finish, lambda: sink.done(query_id, finish))
        else:
            self._timers.call_at_ns(
                finish, lambda: sink.done(query_id, finish, sample_done_ns=sample_done))

    async def stop(self) -> None:
        self._sink = self._timers = None

    def describe(self) -> dict[str, Any]:
        return {"sut": "sim", "service": self.service.kind, "service_mean_ns": self.service.mean_ns,
                "service_sigma": self.service.sigma, "servers": self.servers, "seed": self.seed,
                "error_rate": self.error_rate, "stall_after_s": self.stall_after_s}
