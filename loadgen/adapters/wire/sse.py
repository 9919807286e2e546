"""An incremental Server-Sent Events parser (sans I/O), fast on the one-data-line case.

`SseParser.feed(data)` takes the bytes of one read and answers the `data` payload of every
event it completed, in order; an event split across reads is held until its blank line
arrives, and several events in one read come out together. Lines may end in LF, CRLF or CR
(a CR at the end of a read is held, in case its LF comes next). Comment lines (`:`...) are
skipped, an event of several `data` lines is joined with LF, other fields (`event`, `id`,
`retry`) are ignored, and an event with no `data` line yields nothing. An event that grows
past `MAX_EVENT` bytes raises ValueError.

The fast path (one `data: ` line per event, LF endings) costs one `split` per read and one
slice per event; everything else goes through `_event`.
"""

from __future__ import annotations

__all__ = ["MAX_EVENT", "SseParser"]

MAX_EVENT = 4 << 20


class SseParser:
    """Bytes in, event payloads out."""

    __slots__ = ("_tail",)

    def __init__(self) -> None:
        self._tail = b""

    def feed(self, data: bytes) -> list[bytes]:
        """The payloads of the events completed by `data`."""
        if self._tail:
            data = self._tail + data
        held = b""
        if b"\r" in data:
            if data[-1:] == b"\r":
                data, held = data[:-1], b"\r"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        blocks = data.split(b"\n\n")
        tail = blocks.pop()
        if len(tail) > MAX_EVENT:
            raise ValueError(f"an SSE event longer than {MAX_EVENT} bytes")
        self._tail = tail + held if held else tail
        out = []
        for block in blocks:
            if block[:6] == b"data: " and b"\n" not in block:
                out.append(block[6:])
            elif block:
                payload = _event(block)
                if payload is not None:
                    out.append(payload)
        return out

    @property
    def pending(self) -> bytes:
        """The bytes of an event not yet complete."""
        return self._tail

    def take(self, data: bytes) -> bytes:
        """The pending bytes followed by `data`, the pending bytes forgotten: for a caller
        that reads whole events itself and feeds back what it left."""
        tail, self._tail = self._tail, b""
        return tail + data if tail else data


def _event(block: bytes) -> bytes | None:
    """The joined `data` of one event's lines (LF-separated), or None when it has none."""
    lines = []
    for line in block.split(b"\n"):
        if not line or line[:1] == b":":
            continue
        name, _, value = line.partition(b":")
        if name == b"data":
            lines.append(value[1:] if value[:1] == b" " else value)
    return b"\n".join(lines) if lines else None
