"""Shared helpers: run requests through an engine and collect what each one streamed."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from sut.llm.config import EngineConfig
from sut.llm.engine import LLMEngine
from sut.llm.sequence import Delta, SamplingParams


@dataclass
class Collected:
    """Every delta of one request."""

    deltas: list[Delta] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(d.text for d in self.deltas)

    @property
    def last(self) -> Delta:
        return self.deltas[-1]


class Runner:
    """Submit requests to an engine and wait for all of them."""

    def __init__(self, engine: LLMEngine) -> None:
        self.engine = engine

    def run(self, prompts: Sequence[list[int]], params: SamplingParams,
            priorities: Sequence[int] | None = None, timeout_s: float = 120) -> list[Collected]:
        results = [Collected() for _ in prompts]
        left = [len(prompts)]
        done = threading.Event()
        lock = threading.Lock()

        def collect(index: int):
            def on_output(delta: Delta) -> None:
                results[index].deltas.append(delta)
                if delta.finished:
                    with lock:
                        left[0] -= 1
                        if left[0] == 0:
                            done.set()
            return on_output

        for i, prompt in enumerate(prompts):
            self.engine.submit(prompt, params, collect(i),
                               priorities[i] if priorities else 0)
        assert done.wait(timeout_s), "the engine did not finish in time"
        return results


@pytest.fixture
def make_engine() -> Iterator[object]:
    """A factory of started engines over tiny-llm on the CPU, each stopped at the end."""
    engines: list[LLMEngine] = []

    def make(**knobs: object) -> Runner:
        engine = LLMEngine.build("tiny-llm", EngineConfig(device="cpu", **knobs))  # type: ignore[arg-type]
        engine.start()
        engines.append(engine)
        return Runner(engine)

    yield make
    for engine in engines:
        engine.stop()
