"""The local FIFO in front of a client's connections: requests waiting for a free one.

`Pending` holds requests first in, first out; a query of many requests is queued once, as a
`Job`, whose parts are encoded lazily as they are taken. A request's `Tag` is its query id, or
a (Job, first row) part.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

__all__ = ["Job", "Pending", "Tag"]

P = TypeVar("P")
Tag = Any  # a query id (int) or a (Job, first row) part


class Job(Generic[P]):
    """A query sent as several requests of at most `rows` samples; reported once, at the end."""

    __slots__ = ("components", "encode", "failed", "indices", "last_done", "next", "outstanding",
                 "query_id", "rows", "sample_done", "size")

    def __init__(self, query_id: int, indices: np.ndarray, rows: int,
                 encode: Callable[[Sequence[int]], P]) -> None:
        self.query_id = query_id
        self.indices: list[int] = indices.tolist()
        self.size = len(self.indices)
        self.rows = rows
        self.encode = encode
        self.next = self.outstanding = self.last_done = 0
        self.failed = False
        self.sample_done = [0] * len(indices)
        self.components: dict[str, int] | None = None

    def take(self) -> tuple[Tag, P] | None:
        """The next part to send, or None when all are sent (or the query failed)."""
        start = self.next
        if self.failed or start >= self.size:
            return None
        self.next = start + self.rows
        self.outstanding += 1
        return (self, start), self.encode(self.indices[start:start + self.rows])

    def last_part(self) -> bool:
        """Whether the part now answering is the query's last one (so its timings are kept)."""
        return self.outstanding == 1 and self.next >= self.size and not self.failed


class Pending(Generic[P]):
    """Requests waiting for a free connection or slot, first in, first out."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: collections.deque[tuple[Any, P | None]] = collections.deque()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, tag: Tag, payload: P) -> None:
        """Queue one request."""
        self._items.append((tag, payload))

    def put_job(self, job: Job[P]) -> None:
        """Queue a query of several requests; its parts are encoded as they are taken."""
        self._items.append((job, None))

    def pop(self) -> tuple[Tag, P] | None:
        """The oldest request, or None."""
        items = self._items
        while items:
            tag, payload = items[0]
            if payload is not None:
                items.popleft()
                return tag, payload
            part: tuple[Tag, P] | None = tag.take()
            if part is not None:
                return part
            items.popleft()
        return None

    def fail_all(self, fail: Callable[[Tag, int, str, str | None], None], now_ns: int,
                 kind: str, detail: str | None = None) -> None:
        """Fail every waiting request (nothing can carry them); a `Job` fails once."""
        while self._items:
            tag, payload = self._items.popleft()
            if payload is not None:
                fail(tag, now_ns, kind, detail)
            elif not tag.failed:
                fail((tag, tag.next), now_ns, kind, detail)
