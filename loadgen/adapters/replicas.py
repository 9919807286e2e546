"""Several SUT endpoints in one run (replicas behind no balancer), spread by a policy.

    replicas:POLICY:SPEC;SPEC[;SPEC...]

POLICY is `round_robin` (each in turn), `random` (uniform, seeded) or
`least_outstanding` (the one with the fewest queries in flight, lowest index on
ties); each SPEC is any other `--sut` spec (`http://h1:8000/m;http://h2:8000/m`).
Each query goes whole to one replica. The description gives, per replica, its
own description and what it was sent: issued, done, failed, the most in flight,
and its service latency (from send) mean and max.

Token-streaming replicas work too: `use_prompts` reaches every replica that
takes prompts, and their `streamed`, `sample_streamed` and `failed(..., stream=)`
reports pass through to the run's sink unchanged (see `adapters.tokens`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from loadgen.adapters.base import CompletionSink, SampleTimes, SystemUnderTest, Timers
from loadgen.adapters.tokens import PromptSource, TokenStream
from loadgen.errors import SutSpecError

__all__ = ["POLICIES", "ReplicaSet"]

POLICIES = ("round_robin", "random", "least_outstanding")
RANDOM_SEED = 20


class _Replica:
    """One endpoint's adapter and its counts; the sink it reports to (passes results on)."""

    def __init__(self, spec: str, sut: SystemUnderTest) -> None:
        self.spec, self.sut = spec, sut
        self.sink: Any = None  # the run's CompletionSink (and StreamSink in a token run)
        self.sent: dict[int, int] = {}  # query id -> send time, while in flight
        self.issued = self.done_count = self.failed_count = self.max_outstanding = 0
        self.latency_sum_ns = self.latency_max_ns = 0

    def send(self, query_id: int, samples: np.ndarray) -> None:
        self.sent[query_id] = time.perf_counter_ns()
        self.issued += 1
        self.max_outstanding = max(self.max_outstanding, len(self.sent))
        self.sut.issue(query_id, samples)

    def _settle(self, query_id: int, done_ns: int) -> None:
        sent = self.sent.pop(query_id, None)
        if sent is not None:
            latency = done_ns - sent
            self.latency_sum_ns += latency
            self.latency_max_ns = max(self.latency_max_ns, latency)

    def done(self, query_id: int, done_ns: int, components: Mapping[str, int] | None = None,
             sample_done_ns: SampleTimes | None = None, output: Any = None) -> None:
        self._settle(query_id, done_ns)
        self.done_count += 1
        self.sink.done(query_id, done_ns, components, sample_done_ns, output)

    def streamed(self, query_id: int, done_ns: int, stream: TokenStream,
                 components: Mapping[str, int] | None = None, output: Any = None) -> None:
        self._settle(query_id, done_ns)
        self.done_count += 1
        self.sink.streamed(query_id, done_ns, stream, components, output)

    def sample_streamed(self, query_id: int, stream: TokenStream) -> None:
        self.sink.sample_streamed(query_id, stream)

    def failed(self, query_id: int, done_ns: int, kind: str, detail: str | None = None,
               stream: TokenStream | None = None) -> None:
        self._settle(query_id, done_ns)
        self.failed_count += 1
        if stream is None:
            self.sink.failed(query_id, done_ns, kind, detail)
        else:
            self.sink.failed(query_id, done_ns, kind, detail, stream=stream)

    def describe(self) -> dict[str, Any]:
        answered = self.done_count + self.failed_count
        return {"spec": self.spec, **self.sut.describe(), "issued": self.issued,
                "done": self.done_count, "failed": self.failed_count,
                "max_outstanding": self.max_outstanding,
                "service_latency_mean_ns": self.latency_sum_ns // answered if answered else 0,
                "service_latency_max_ns": self.latency_max_ns}


class ReplicaSet:
    """Queries spread over several SUTs by a policy; each reports through this one's sink."""

    name = "replicas"

    def __init__(self, policy: str, replicas: Sequence[tuple[str, SystemUnderTest]]) -> None:
        if policy not in POLICIES:
            raise SutSpecError(f"replicas: policy {policy!r}: expected one of "
                               f"{', '.join(POLICIES)}")
        if len(replicas) < 2:
            raise SutSpecError("replicas: give at least two SPECs, separated by ';'")
        self.policy = policy
        self.replicas = [_Replica(spec, sut) for spec, sut in replicas]
        self.shares_gil = any(getattr(sut, "shares_gil", False) for _, sut in replicas)
        self._turn = itertools.cycle(self.replicas)
        self._rng = np.random.default_rng(RANDOM_SEED)
        self._pick: Callable[[], _Replica] = {
            "round_robin": lambda: next(self._turn),
            "random": lambda: self.replicas[int(self._rng.integers(len(self.replicas)))],
            "least_outstanding": lambda: min(self.replicas, key=lambda r: len(r.sent)),
        }[policy]

    @classmethod
    def from_spec(cls, rest: str, make: Callable[[str], SystemUnderTest]) -> ReplicaSet:
        """From 'POLICY:SPEC;SPEC...' (what follows 'replicas:'); `make` builds each SPEC."""
        policy, sep, specs = rest.partition(":")
        if not sep:
            raise SutSpecError("replicas: expected replicas:POLICY:SPEC;SPEC[;...], policy one "
                               f"of {', '.join(POLICIES)}")
        parts = [s.strip() for s in specs.split(";") if s.strip()]
        if any(p.startswith("replicas:") for p in parts):
            raise SutSpecError("replicas: a replica cannot itself be a replica set")
        return cls(policy.strip(), [(p, make(p)) for p in parts])

    def use_prompts(self, prompts: PromptSource) -> None:
        """Hand the run's prompts to every replica that streams tokens."""
        for r in self.replicas:
            use = getattr(r.sut, "use_prompts", None)
            if use is not None:
                use(prompts)

    async def start(self, sink: CompletionSink, timers: Timers) -> None:
        for r in self.replicas:
            r.sink = sink
            await r.sut.start(r, timers)

    def issue(self, query_id: int, sample_indices: np.ndarray) -> None:
        self._pick().send(query_id, sample_indices)

    async def stop(self) -> None:
        for r in self.replicas:
            await r.sut.stop()

    def describe(self) -> dict[str, Any]:
        return {"sut": "replicas", "policy": self.policy,
                "replicas": [r.describe() for r in self.replicas]}
