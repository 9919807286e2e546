"""One engine request seen from asyncio: its deltas arrive on the loop, in order.

The engine calls back on its own thread; each delta is handed to the loop with
`call_soon_threadsafe` and read with `async for`. Leaving before the last delta (a client
that went away) cancels the request, which frees its KV blocks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from sut.llm.engine import LLMEngine
from sut.llm.protocol import Generation
from sut.llm.sequence import Delta

__all__ = ["RequestStream"]


class RequestStream:
    """Submit on creation (raises what `LLMEngine.submit` raises); iterate the deltas."""

    def __init__(self, engine: LLMEngine, generation: Generation) -> None:
        self._engine = engine
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Delta] = asyncio.Queue()
        self.finished = False
        self.request_id = engine.submit(generation.prompt, generation.params, self._on_output,
                                        generation.priority)

    def _on_output(self, delta: Delta) -> None:
        try:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, delta)
        except RuntimeError:  # the loop has closed
            pass

    async def deltas(self) -> AsyncGenerator[Delta, None]:
        """Every delta up to the last; a consumer that stops early cancels the request."""
        try:
            while not self.finished:
                delta = await self._queue.get()
                self.finished = delta.finished
                yield delta
        finally:
            if not self.finished:
                self._engine.cancel(self.request_id)
