"""A scripted hostile client of our own for the LLM and OIP servers: raw bodies and raw
header bytes over loopback HTTP, answers read whole and parsed strictly (no bare NaN)."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["Answer", "get", "open_request", "post", "strict_json", "wait_for"]


def strict_json(raw: bytes | str) -> Any:
    """JSON as a strict parser reads it: NaN and Infinity are refused."""
    def refuse(word: str) -> Any:
        raise ValueError(f"bare {word} in JSON")
    return json.loads(raw, parse_constant=refuse)


@dataclass(frozen=True, slots=True)
class Answer:
    """A status, the JSON body (non-streamed) or the SSE events (`[DONE]` as a str)."""

    status: int
    body: Any
    events: list[Any]

    @property
    def message(self) -> str:
        """The error message of a JSON error body."""
        error = self.body["error"]
        return str(error["message"] if isinstance(error, dict) else error)


def post(url: str, path: str, body: Any, headers: dict[str, Any] | None = None,
         timeout_s: float = 60) -> Answer:
    """POST `body` (a str or bytes as it is, anything else as JSON) and read the answer."""
    parts = urlsplit(url)
    raw = body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass") \
        if isinstance(body, str) else json.dumps(body).encode()
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)
    try:
        conn.request("POST", path, body=raw, headers={
            "Content-Type": "application/json", **(headers or {})})
        resp = conn.getresponse()
        data = resp.read()
        kind = resp.getheader("Content-Type") or ""
    finally:
        conn.close()
    if not kind.startswith("text/event-stream"):
        return Answer(resp.status, strict_json(data) if data else None, [])
    events: list[Any] = []
    for block in data.decode().split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        payload = block[len("data: "):]
        events.append(payload if payload == "[DONE]" else strict_json(payload))
    return Answer(resp.status, None, events)


def get(url: str, path: str) -> tuple[int, bytes]:
    """GET `path`: the status and the raw body."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def open_request(url: str, path: str, body: dict[str, Any],
                 headers: dict[str, str] | None = None) -> socket.socket:
    """Send a POST on a raw socket and return it unread (the caller closes it: a client
    that goes away)."""
    parts = urlsplit(url)
    raw = json.dumps(body).encode()
    head = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    sock = socket.create_connection((parts.hostname or "", parts.port or 80), timeout=30)
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}\r\n"
                 f"Content-Type: application/json\r\nContent-Length: {len(raw)}\r\n"
                 f"{head}\r\n".encode() + raw)
    return sock


def wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    """Poll `check` until true; AssertionError after `timeout_s`."""
    give_up = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < give_up, "condition not reached in time"
        time.sleep(0.005)
