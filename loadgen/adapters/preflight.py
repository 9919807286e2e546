"""One request before the run, so a wrong endpoint fails at once with its fix.

A streaming SUT sends one short request of the run's first prompt: the route must answer
200, every event must parse, none may carry an in-band error, and at least one must carry
text. `openai://` first reads `GET {base}/models` and fails when the model asked for is not
listed, naming the ones that are. A run that would have failed on every request instead
exits 3 before it starts, with one reason rather than six.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable

from loadgen.adapters.wire.endpoint import Endpoint
from loadgen.adapters.wire.fasthttp import fetch, request_bytes
from loadgen.errors import SutError

__all__ = ["PREFLIGHT_TOKENS", "check_stream", "served_models", "sse_payloads"]

PREFLIGHT_TOKENS = 4
"""Output tokens the preflight request asks for (a short answer is enough)."""


def sse_payloads(body: bytes) -> list[bytes]:
    """The data of each SSE event in a whole response body."""
    out: list[bytes] = []
    for line in body.replace(b"\r\n", b"\n").split(b"\n"):
        if line.startswith(b"data:"):
            out.append(line[5:].strip())
    return out


async def served_models(endpoint: Endpoint, path: str, headers: dict[str, str],
                        context: ssl.SSLContext | None) -> list[str] | None:
    """The model ids an OpenAI-compatible `GET path` lists; None when the route is absent,
    fails or does not answer an OpenAI list (not every server has it)."""
    request = request_bytes("GET", path, endpoint.address, headers)
    try:
        status, body = await fetch(endpoint.host, endpoint.port, request, context, 10.0)
    except (OSError, TimeoutError, ValueError, EOFError):
        return None  # the preflight request that follows says what is wrong
    if status != 200:
        return None
    try:
        data = json.loads(body).get("data")
    except (ValueError, AttributeError):
        return None
    if not isinstance(data, list):
        return None
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


async def check_stream(endpoint: Endpoint, request: bytes, path: str,
                       context: ssl.SSLContext | None,
                       has_text: Callable[[dict[str, object]], bool], hint: str = "") -> None:
    """Send one streaming request; SutError unless it answers 200 with parseable events,
    no in-band error and some text (`has_text` reads one event)."""
    try:
        status, body = await fetch(endpoint.host, endpoint.port, request, context, 30.0)
    except (OSError, TimeoutError, ValueError, EOFError) as exc:
        raise SutError(f"{endpoint.url}: the preflight request (POST {path}) failed: "
                       f"{exc or type(exc).__name__}") from exc
    where = f"{endpoint.url}: preflight POST {path}"
    if status != 200:
        text = body[:300].decode("utf-8", "replace").strip()
        raise SutError(f"{where} answered {status}: {text}{hint}")
    docs: list[dict[str, object]] = []
    for payload in sse_payloads(body):
        if payload == b"[DONE]":
            continue
        try:
            doc = json.loads(payload)
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            raise SutError(f"{where}: an event is not a JSON object ({payload[:80]!r}): "
                           "is this the protocol the SPEC names?")
        if doc.get("error") is not None:
            raise SutError(f"{where}: the stream carries an error: {doc['error']}")
        docs.append(doc)
    if not docs:
        raise SutError(f"{where}: 200 but no SSE events ({body[:80]!r}): is this the protocol "
                       "the SPEC names?")
    if not any(has_text(doc) for doc in docs):
        raise SutError(f"{where}: {len(docs)} events, none with text")

