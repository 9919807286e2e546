"""A web server's welcome page on every request: `python -m tests.loadgen.llm_wire.welcome_server`.

Answers each request (head and Content-Length body read) with a 200 `text/html` page, as
nginx does at `/`; `--close` sends it close-delimited instead (no Content-Length, then the
connection closes). Prints `port=N` once listening on 127.0.0.1; exits after `--lifetime-s`.
"""

from __future__ import annotations

import argparse
import asyncio

PAGE = (b"<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head>"
        b"<body><h1>Welcome to nginx!</h1></body></html>")


async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 close: bool) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            await reader.readexactly(length)
            framing = b"" if close else b"Content-Length: %d\r\n" % len(PAGE)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n" + framing + b"\r\n"
                         + PAGE)
            await writer.drain()
            if close:
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(args: argparse.Namespace) -> None:
    server = await asyncio.start_server(lambda r, w: answer(r, w, args.close), "127.0.0.1", 0)
    print(f"port={server.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.sleep(args.lifetime_s)
    server.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lifetime-s", type=float, default=120.0)
    parser.add_argument("--close", action="store_true")
    asyncio.run(main(parser.parse_args()))
