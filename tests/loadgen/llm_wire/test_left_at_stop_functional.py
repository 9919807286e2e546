"""A run that ends with streams still open says where they were: waiting for a connection
(`queued`), sent without an answer (`sent`), or answering (`streaming`); an unfinished run
then tells a server that never answered from a client that never sent."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from loadgen.adapters.openai import OpenAISut
from loadgen.adapters.streaming import Exchange
from loadgen.adapters.tokens import Prompt
from tests.loadgen.llm_wire.scripted import (
    Collected,
    Prompts,
    chat_chunk,
    chunk,
    event,
    head,
    run_bounded,
    scripted,
)

pytestmark = pytest.mark.functional


def test_streams_left_at_stop_are_counted_by_where_they_were() -> None:
    async def go() -> None:
        answering = [head() + chunk(event(chat_chunk("a"))), 30.0]
        silent: list[bytes | float | str] = [30.0]
        async with scripted([answering, silent]) as server:
            sut = OpenAISut.from_spec(
                f"openai://127.0.0.1:{server.port}/m?max_in_flight=2&preflight=0")
            sut.use_prompts(Prompts(Prompt("hello", 1, 4)))
            await sut.start(Collected(expected=3), None)  # type: ignore[arg-type]
            for query in range(3):
                sut.issue(query, np.array([query]))
            pool = sut._pool
            assert pool is not None

            def streaming() -> bool:
                tags = pool.in_flight()
                return len(server.served.requests) == 2 and any(
                    isinstance(t, Exchange) and t.stream.chunk_ns for t in tags)

            while not streaming():  # bounded by the wait_for below
                await asyncio.sleep(0.005)
            assert sut.describe().get("left_at_stop") is None  # nothing left yet
            await sut.stop()
        assert sut.describe()["left_at_stop"] == {"queued": 1, "sent": 1, "streaming": 1}
    run_bounded(go(), 20)
