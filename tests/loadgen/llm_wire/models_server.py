"""An OpenAI-compatible server that serves one model, `tiny`: `python -m
tests.loadgen.llm_wire.models_server`.

`GET /v1/models` lists it; a chat request for it streams two chunks and `[DONE]`; one for
any other model is a 404 with OpenAI's error body. `--no-models` drops the list route.
Every POST is appended to `--log` (one line: the model asked). Prints `port=N` once
listening on 127.0.0.1; exits after `--lifetime-s`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

from aiohttp import web

MODEL = "tiny"


def _app(log: str, models: bool) -> web.Application:
    async def listing(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        with Path(log).open("a") as f:  # noqa: ASYNC230 - one short line per request
            f.write(json.dumps(body.get("model")) + "\n")
        if body.get("model") != MODEL:
            return web.json_response({"error": {"message": f"The model `{body.get('model')}` "
                                                "does not exist.", "code": 404}}, status=404)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for text in ("hi", " there"):
            doc = {"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]}
            await response.write(b"data: " + json.dumps(doc).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    if models:
        app.router.add_get("/v1/models", listing)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _main(args: argparse.Namespace) -> None:
    runner = web.AppRunner(_app(args.log, not args.no_models))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    print(f"port={server.sockets[0].getsockname()[1]}", flush=True)  # type: ignore[union-attr]
    await asyncio.sleep(args.lifetime_s)
    await runner.cleanup()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lifetime-s", type=float, default=120.0)
    parser.add_argument("--log", required=True)
    parser.add_argument("--no-models", action="store_true")
    asyncio.run(_main(parser.parse_args()))
