"""An OpenAI-compatible streaming server on a stack we did not write: Starlette on uvicorn (h11).

Written from the OpenAI API reference (it imports nothing of `loadgen`):
POST /v1/chat/completions and /v1/completions with `stream: true` answer server-sent
events from a `StreamingResponse` (uvicorn frames them chunked): `max_tokens` tokens
(`" tok"`), one per event, `--gap-ms` apart; chat opens with a role-only delta and closes with
an empty delta carrying `finish_reason`; `stream_options.include_usage` adds the usage chunk
(`choices: []`); then `data: [DONE]`. A request without `stream: true`, or for another model
than `m`, gets OpenAI's error shape (`{"error": {"message", "type", "code"}}`, 400 / 404).

    python -m tests.thirdparty.openai_starlette_server [--gap-ms 1] [--lifetime-s 120]

binds 127.0.0.1 on a free port, prints `port=N` on one line, and serves until killed or
until `--lifetime-s` has passed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import sys
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

MODEL = "m"
GAP_S = [0.001]


def _error(status: int, message: str, kind: str, code: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": None,
                                   "code": code}}, status_code=status)


def _sse(doc: Any) -> str:
    return f"data: {json.dumps(doc)}\n\n"


async def _events(body: dict[str, Any], chat: bool) -> AsyncIterator[str]:
    tokens = int(body.get("max_tokens") or 16)
    created, ident = int(time.time()), "chatcmpl-3p" if chat else "cmpl-3p"
    kind = "chat.completion.chunk" if chat else "text_completion"

    def chunk(choice: dict[str, Any]) -> dict[str, Any]:
        return {"id": ident, "object": kind, "created": created, "model": MODEL,
                "choices": [{"index": 0, "logprobs": None, **choice}]}

    if chat:
        yield _sse(chunk({"delta": {"role": "assistant", "content": ""}, "finish_reason": None}))
    for i in range(tokens):
        await asyncio.sleep(GAP_S[0])
        last = not chat and i == tokens - 1
        choice = {"delta": {"content": " tok"}} if chat else {"text": " tok"}
        yield _sse(chunk({**choice, "finish_reason": "length" if last else None}))
    if chat:
        yield _sse(chunk({"delta": {}, "finish_reason": "length"}))
    if (body.get("stream_options") or {}).get("include_usage"):
        prompt = body.get("prompt") or " ".join(m["content"] for m in body["messages"])
        yield _sse({"id": ident, "object": kind, "created": created, "model": MODEL,
                    "choices": [], "usage": {"prompt_tokens": len(prompt.split()),
                                             "completion_tokens": tokens,
                                             "total_tokens": len(prompt.split()) + tokens}})
    yield "data: [DONE]\n\n"


async def _complete(request: Request, chat: bool) -> Response:
    body = await request.json()
    if body.get("model") != MODEL:
        return _error(404, f"The model `{body.get('model')}` does not exist.",
                      "invalid_request_error", "model_not_found")
    if body.get("stream") is not True:
        return _error(400, "this server only streams", "invalid_request_error", "stream")
    if chat and not isinstance(body.get("messages"), list) or not chat and "prompt" not in body:
        return _error(400, "messages or prompt missing", "invalid_request_error", "missing")
    return StreamingResponse(_events(body, chat), media_type="text/event-stream")


async def chat_completions(request: Request) -> Response:
    return await _complete(request, True)


async def completions(request: Request) -> Response:
    return await _complete(request, False)


app = Starlette(routes=[Route("/v1/chat/completions", chat_completions, methods=["POST"]),
                        Route("/v1/completions", completions, methods=["POST"])])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gap-ms", type=float, default=1.0)
    parser.add_argument("--lifetime-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    GAP_S[0] = args.gap_ms / 1e3
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted ones inherit it
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    server = uvicorn.Server(uvicorn.Config(app, http="h11", loop="asyncio", log_level="warning",
                                           lifespan="off", access_log=False))
    timer = threading.Timer(args.lifetime_s, lambda: setattr(server, "should_exit", True))
    timer.daemon = True
    timer.start()
    print(f"port={sock.getsockname()[1]}", flush=True)
    server.run(sockets=[sock])
    sys.exit(0)


if __name__ == "__main__":
    main()
