"""The streaming adapters facing servers that misbehave: a 200 that is no event stream, an
endless stream, text that is not Unicode. Each fails closed, naming what arrived, and keeps
what a stream delivered as partial."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadgen.adapters.registry import make_sut
from loadgen.adapters.tokens import Prompt
from loadgen.cli.main import main as cli_main
from tests.loadgen.llm_wire.scripted import (
    CLOSE,
    Collected,
    chat_chunk,
    chunk,
    event,
    head,
    run_bounded,
    run_streams,
    scripted,
    scripted_sut,
    sse_response,
)
from tests.served import ROOT, port_server

pytestmark = pytest.mark.functional

PAGE = b"<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head><body>" + \
    b"<h1>Welcome</h1>" + b"<p>It works.</p>" * 20 + b"</body></html>"


def _head(content_type: str | None, framing: str, length: int) -> bytes:
    lines = ["HTTP/1.1 200 OK"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    if framing == "length":
        lines.append(f"Content-Length: {length}")
    elif framing == "chunked":
        lines.append("Transfer-Encoding: chunked")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _answer(content_type: str | None, framing: str, body: bytes = PAGE) -> list[Any]:
    if framing == "chunked":
        return [_head(content_type, framing, len(body)), chunk(body), chunk(b"")]
    return [_head(content_type, framing, len(body)), body] + ([CLOSE] if framing == "close" else [])



def _failure(sink: Collected) -> tuple[str, str, Any]:
    assert not sink.streams, "counted as a success"
    _, kind, detail, stream = sink.failures[0]
    assert detail is not None
    return kind, detail, stream


HELLO = Prompt("hello", 1, 4)


def _run(steps: list[Any], scheme: str = "openai", options: str = "",
         prompt: Prompt = HELLO) -> Collected:
    async def go() -> Collected:
        async with scripted([steps]) as server:
            sink, _ = await run_streams(scripted_sut(server.port, options, scheme),
                                       prompt=prompt)
        return sink
    return run_bounded(go())


# -- 12: a 200 that is not an event stream ------------------------------------------------------


@pytest.mark.parametrize("scheme", ["openai", "generate"])
@pytest.mark.parametrize("framing", ["length", "close", "chunked"])
def test_a_welcome_page_is_a_protocol_error_naming_it(scheme: str, framing: str) -> None:
    kind, detail, _ = _failure(_run(_answer("text/html; charset=utf-8", framing), scheme))
    assert kind == "protocol_error"
    assert "text/html" in detail and "Welcome to nginx" in detail


@pytest.mark.parametrize("content_type", ["application/json", None])
def test_json_or_no_content_type_is_no_event_stream(content_type: str | None) -> None:
    body = json.dumps({"choices": [{"message": {"content": "hi"}}]}).encode()
    kind, detail, _ = _failure(_run(_answer(content_type, "length", body)))
    assert kind == "protocol_error"
    assert (content_type or "(none)") in detail and '"choices"' in detail


@pytest.mark.parametrize("scheme", ["openai", "generate"])
def test_an_event_stream_without_a_single_event_is_a_protocol_error(scheme: str) -> None:
    steps = [head(), chunk(b"hello, this is not server-sent events\n"), chunk(b"")]
    kind, detail, _ = _failure(_run(steps, scheme))
    assert kind == "protocol_error" and "no SSE event" in detail and "hello, this" in detail


def test_a_true_event_stream_with_parameters_in_its_content_type_still_streams() -> None:
    steps = sse_response([chat_chunk(" a"), chat_chunk(" b")])
    first = steps[0]
    assert isinstance(first, bytes)
    steps[0] = first.replace(b"text/event-stream", b"Text/Event-Stream; charset=utf-8")
    sink = _run(steps)
    assert sink.streams[0][1].chunk_tokens == [1, 1]


# -- 13: per-stream caps ------------------------------------------------------------------------


def _endless(events: int, gap_s: float = 0.0) -> list[Any]:
    steps: list[Any] = [head()]
    for _ in range(events):
        steps.append(chunk(event(chat_chunk(" tok"))))
        if gap_s:
            steps.append(gap_s)
    return steps + [CLOSE]


@pytest.mark.parametrize(("options", "cap"), [
    ("&max_stream_events=40", "max_stream_events=40"),
    ("&max_stream_bytes=5000", "max_stream_bytes=5000"),
])
def test_a_stream_past_its_cap_ends_as_an_error_keeping_what_it_delivered(
        options: str, cap: str) -> None:
    kind, detail, partial = _failure(_run(_endless(3000), options=options))
    assert kind == "stream_cap" and cap in detail
    assert partial is not None and 0 < len(partial.chunk_ns) < 3000  # kept, and cut short
    assert partial.client_tokens == len(partial.chunk_ns)


def test_a_stream_past_its_time_cap_ends_as_an_error() -> None:
    kind, detail, partial = _failure(_run(_endless(100, gap_s=0.05), options="&max_stream_s=1"))
    assert kind == "stream_cap" and "max_stream_s=1" in detail
    assert partial is not None and 0 < len(partial.chunk_ns) < 100  # cut short at ~1 s of 5


def test_default_caps_grow_with_the_requests_max_tokens() -> None:
    sut = scripted_sut(1)
    small, large = sut.caps(16), sut.caps(4096)
    assert all(a < b for a, b in zip(small, large, strict=True))
    assert large[1] > 4096 and large[2] > 600  # room for every token, and time for them
    assert scripted_sut(1, "&max_stream_events=7&max_stream_bytes=9&max_stream_s=3") \
        .caps(4096) == (9, 7, 3)


def test_the_default_event_cap_ends_an_endless_stream() -> None:
    prompt = Prompt("hello", 1, 8)  # 8 tokens asked: far fewer events than 3,000
    kind, detail, partial = _failure(_run(_endless(3000), prompt=prompt))
    assert kind == "stream_cap" and "max_stream_events" in detail and partial is not None


# -- 14: text that is not Unicode, on the fast and the slow path --------------------------------


def _with_bad_text(learned: int, text: bytes) -> list[Any]:
    good = [chunk(event(chat_chunk(" a"))) for _ in range(learned)]
    bad = event(json.dumps(chat_chunk("@@")).encode().replace(b"@@", text))
    return [head(), *good, chunk(bad), *good, chunk(event(b"[DONE]")), chunk(b"")]


@pytest.mark.parametrize("learned", [0, 8], ids=["first-chunk", "after-the-fast-path-learned"])
@pytest.mark.parametrize("text", [b"\xff\xfe", b"ok\xc3(", b"\\ud800"],
                         ids=["invalid-byte", "cut-sequence", "lone-surrogate"])
def test_text_that_is_not_unicode_is_a_protocol_error_on_every_path(learned: int,
                                                                   text: bytes) -> None:
    kind, _, partial = _failure(_run(_with_bad_text(learned, text)))
    assert kind == "protocol_error"
    assert (partial is None) == (learned == 0)


# -- 12, non-streamed: the OIP http:// adapter expects JSON ---------------------------------------


def test_an_oip_inference_answered_by_a_web_page_is_a_protocol_error() -> None:
    metadata = json.dumps({"name": "m", "inputs": [{"name": "x", "datatype": "FP32",
                                                    "shape": [-1, 4]}],
                           "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}]})
    ok: list[Any] = [b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"]
    meta: list[Any] = [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (len(metadata), metadata.encode())]

    async def go() -> Collected:
        async with scripted([ok, ok, meta, _answer("text/html", "length")]) as server:
            sut = make_sut(f"http://127.0.0.1:{server.port}/m?connections=1")
            sink = Collected()
            await sut.start(sink, None)  # type: ignore[arg-type]
            try:
                sut.issue(0, np.array([0]))
                await asyncio.wait_for(sink.finished.wait(), 10)
            finally:
                await sut.stop()
        return sink

    sink = run_bounded(go())
    assert not sink.queries and 0 not in sink.streams
    _, kind, detail, _ = sink.failures[0]
    assert kind == "protocol_error" and detail is not None and "Welcome to nginx" in detail


# -- 12, end to end: a run against a welcome page -----------------------------------------------


@pytest.fixture(scope="module", params=[False, True], ids=["content-length", "close-delimited"])
def welcome_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A welcome-page server (`--close`: the page's body ends with the connection), started
    once for the module's runs: its port."""
    flags = ["--close"] if request.param else []
    with port_server("tests.loadgen.llm_wire.welcome_server", *flags) as port:
        yield port


@pytest.mark.parametrize("scheme", ["openai", "generate"])
def test_a_run_against_a_welcome_page_fails_closed(scheme: str, welcome_port: int,
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The SUT's preflight request meets the page first: the run is refused before it
    starts (exit 3), naming what came; the adapter tests above cover a page met mid-run.
    `loadgen run` through the CLI's entry point, in this process."""
    code = cli_main(
        ["run", str(ROOT / "scenarios/llm_server.toml"), "--sut",
         f"{scheme}://127.0.0.1:{welcome_port}/m?max_in_flight=4", "--out", str(tmp_path / "run"),
         "--quiet", "--set", "preset='dev'", "--set", "target_qps=20", "--set",
         "min_duration_s=0.5", "--set", "warmup_s=0", "--set", "min_query_count=5"])
    err = capsys.readouterr().err
    assert code == 3, err
    assert "Welcome to nginx" in err and "Traceback" not in err
    assert not (tmp_path / "run" / "result.json").exists()
