"""openai:// against the scripted SSE server: every known pitfall of token streams.

Each test scripts the server's bytes, their split into writes and the pauses between them;
the server stamps each write, so "stamped at the read that completed it" is checked against
when the bytes left (a stamp can only follow its write).
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from loadgen.adapters.openai import OpenAISut
from loadgen.adapters.tokens import Prompt
from loadgen.errors import SutSpecError
from tests.loadgen.llm_wire.scripted import (
    CLOSE,
    Collected,
    Prompts,
    chat_chunk,
    chunk,
    completion_chunk,
    event,
    head,
    run_bounded,
    run_streams,
    scripted,
    scripted_sut,
    sse_response,
)

pytestmark = pytest.mark.functional


def test_role_only_first_chunk_is_no_token_and_usage_gives_the_counts() -> None:
    async def go() -> None:
        events = [chat_chunk("", role=True), chat_chunk("Hel"), chat_chunk("lo", finish="length"),
                  chat_chunk(choices=[], usage={"prompt_tokens": 5, "completion_tokens": 2,
                                                "total_tokens": 7})]
        async with scripted([sse_response(events, gap_s=0.01)]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        _, stream = sink.streams[0]
        assert len(stream.chunk_ns) == 2 and stream.chunk_tokens == [1, 1]
        assert stream.first_answer == 0
        assert stream.server_output_tokens == 2 and stream.input_tokens == 5
        assert stream.client_tokens == 2 and stream.finish_reason == "length"
        body = json.loads(server.served.requests[0].split(b"\r\n\r\n", 1)[1])
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert body["messages"] == [{"role": "user", "content": "hello"}]
        assert body["model"] == "m" and body["max_tokens"] == 4
    run_bounded(go())


@pytest.mark.parametrize(("details", "cached", "reasoning"), [
    ({"prompt_tokens_details": {"cached_tokens": 3},
      "completion_tokens_details": {"reasoning_tokens": 1}}, 3, 1),
    ({"prompt_tokens_details": None, "completion_tokens_details": {"reasoning_tokens": None}},
     None, None),
    ({}, None, None),
])
def test_usage_details_give_cached_and_reasoning_tokens(
        details: dict[str, object], cached: int | None, reasoning: int | None) -> None:
    async def go() -> None:
        usage = {"prompt_tokens": 5, "completion_tokens": 2, **details}
        events = [chat_chunk("Hel"), chat_chunk("lo", finish="length"),
                  chat_chunk(choices=[], usage=usage)]
        async with scripted([sse_response(events)]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        _, stream = sink.streams[0]
        assert (stream.cached_tokens, stream.reasoning_tokens) == (cached, reasoning)
    run_bounded(go())


@pytest.mark.parametrize("choices", [[], None, "missing"])
def test_a_usage_chunk_does_not_extend_the_stream(choices: object) -> None:
    async def go() -> None:
        usage = {"prompt_tokens": 3, "completion_tokens": 1}
        events = [chat_chunk("Hi"), chat_chunk(choices=choices, usage=usage)]
        async with scripted([sse_response(events, gap_s=0.05)]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        done_ns, stream = sink.streams[0]
        assert len(stream.chunk_ns) == 1 and stream.server_output_tokens == 1
        usage_write = server.served.writes[2][0]
        assert stream.chunk_ns[0] < usage_write <= done_ns  # E2E ends at the content chunk
    run_bounded(go())


def test_without_usage_the_client_count_stands() -> None:
    async def go() -> None:
        async with scripted([sse_response([chat_chunk(" one"), chat_chunk(" two three")])]) \
                as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        stream = sink.streams[0][1]
        assert stream.server_output_tokens is None
        assert stream.input_tokens == 1  # the workload's count of the prompt (HELLO)
        assert stream.chunk_tokens == [1, 2] and stream.output_tokens == 3
    run_bounded(go())


@pytest.mark.parametrize(("options", "tokenizer", "tokens"), [
    ("", "bytes", [4, 10]),  # the run's tokenizer setting counts
    ("&tokenizer=approx", "bytes", [1, 2]),  # the spec's own wins
    ("", None, [1, 2]),  # a source without one: approx
])
def test_the_runs_tokenizer_counts_unless_the_spec_names_one(
        options: str, tokenizer: str | None, tokens: list[int]) -> None:
    async def go() -> None:
        async with scripted([sse_response([chat_chunk(" one"), chat_chunk(" two three")])]) \
                as server:
            streaming = scripted_sut(server.port, options)
            sink, _ = await run_streams(streaming, tokenizer=tokenizer)
        assert sink.streams[0][1].chunk_tokens == tokens
        assert streaming.describe()["tokenizer"] == (tokenizer if not options and tokenizer
                                                      else "approx")
    run_bounded(go())


def test_several_tokens_in_one_chunk_with_continuous_usage_take_the_servers_count() -> None:
    async def go() -> None:
        events = [chat_chunk("a", usage={"prompt_tokens": 2, "completion_tokens": 1}),
                  chat_chunk(" b c", usage={"prompt_tokens": 2, "completion_tokens": 5}),
                  chat_chunk(choices=[], usage={"prompt_tokens": 2, "completion_tokens": 5})]
        async with scripted([sse_response(events)]) as server:
            sink, _ = await run_streams(scripted_sut(server.port, "&continuous_usage=1"))
        stream = sink.streams[0][1]
        assert stream.chunk_tokens == [1, 4] and stream.client_tokens == 3
        assert stream.server_output_tokens == 5
        body = json.loads(server.served.requests[0].split(b"\r\n\r\n", 1)[1])
        assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    run_bounded(go())


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_reasoning_counts_for_ttft_not_ttfo(key: str) -> None:
    async def go() -> None:
        events = [chat_chunk(role=True, content=""), chat_chunk(reasoning="Let", reasoning_key=key),
                  chat_chunk(reasoning=" me", reasoning_key=key),
                  chat_chunk(reasoning=" think", reasoning_key=key), chat_chunk("Yes"),
                  chat_chunk(" sir")]
        async with scripted([sse_response(events)]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        stream = sink.streams[0][1]
        assert len(stream.chunk_ns) == 5 and stream.first_answer == 3
    run_bounded(go())


def test_events_split_across_reads_are_stamped_at_the_read_that_completes_them() -> None:
    async def go() -> None:
        raw = event(chat_chunk("Hello"))
        whole = chunk(raw)
        steps = [head(), whole[:3], 0.03, whole[3:20], 0.03, whole[20:], 0.03,
                 chunk(event(b"[DONE]")) + chunk(b"")]
        async with scripted([steps]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        stream = sink.streams[0][1]
        last_part = server.served.writes[3][0]
        assert len(stream.chunk_ns) == 1 and stream.chunk_ns[0] >= last_part
    run_bounded(go())


def test_a_chunk_cut_inside_its_data_hands_on_the_events_already_whole() -> None:
    async def go() -> None:
        data = event(chat_chunk("a")) + event(chat_chunk("b"))
        whole = chunk(data)
        cut = len(whole) - len(event(chat_chunk("b"))) - 1
        steps = [head(), whole[:cut], 0.05, whole[cut:], chunk(event(b"[DONE]")), chunk(b"")]
        async with scripted([steps]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        stream = sink.streams[0][1]
        first, second = server.served.writes[1][0], server.served.writes[2][0]
        assert first <= stream.chunk_ns[0] < second <= stream.chunk_ns[1]
    run_bounded(go())


def test_several_events_in_one_read_share_its_stamp_and_comments_are_skipped() -> None:
    async def go() -> None:
        body = b": ping\n\n" + b"".join(event(chat_chunk(t)) for t in ("a", "b", "c")) \
            + b": keep-alive\n\n" + event(b"[DONE]")
        async with scripted([[head(), chunk(body) + chunk(b"")]]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        stream = sink.streams[0][1]
        assert len(stream.chunk_ns) == 3 and len(set(stream.chunk_ns)) == 1
    run_bounded(go())


def test_crlf_events_and_close_delimited_body() -> None:
    async def go() -> None:
        body = b"".join(b"data: " + json.dumps(chat_chunk(t)).encode() + b"\r\n\r\n"
                        for t in ("x", "y")) + b"data: [DONE]\r\n\r\n"
        async with scripted([[head(chunked=False), body, CLOSE]]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        assert len(sink.streams[0][1].chunk_ns) == 2
    run_bounded(go())


def test_a_close_delimited_body_without_done_is_a_cut_stream() -> None:
    async def go() -> None:
        async with scripted([[head(chunked=False), event(chat_chunk("x")), CLOSE]]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        _, kind, _, stream = sink.failures[0]
        assert kind == "stream_cut" and stream is not None and len(stream.chunk_ns) == 1
    run_bounded(go())


def test_an_in_band_error_after_200_fails_with_the_timings_kept_and_the_connection_reused() -> None:
    async def go() -> None:
        error = {"error": {"message": "out of KV cache", "type": "InternalServerError",
                           "code": 500}}
        first = sse_response([chat_chunk("a"), chat_chunk("b"), error])
        second = sse_response([chat_chunk("ok")])
        async with scripted([first, second]) as server:
            sink, _ = await run_streams(scripted_sut(server.port), count=2)
        _, kind, detail, stream = sink.failures[0]
        assert kind == "stream_error" and detail is not None and "out of KV cache" in detail
        assert stream is not None and len(stream.chunk_ns) == 2
        assert len(sink.streams[1][1].chunk_ns) == 1
        assert len(server.served.requests) == 2
    run_bounded(go())


def test_a_stream_cut_mid_way_fails_with_its_partial_stream() -> None:
    async def go() -> None:
        steps = sse_response([chat_chunk("a"), chat_chunk("b")], done=False)[:-1] + [CLOSE]
        async with scripted([steps]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        _, kind, _, stream = sink.failures[0]
        assert kind == "stream_cut" and stream is not None and len(stream.chunk_ns) == 2
    run_bounded(go())


@pytest.mark.parametrize(("status", "phrase"), [(429, "Too Many Requests"), (400, "Bad Request")])
def test_an_error_status_before_the_stream(status: int, phrase: str) -> None:
    async def go() -> None:
        body = json.dumps({"error": {"message": "slow down", "type": "rate_limit"}}).encode()
        steps = [head(status, chunked=False, length=len(body)) + body,
                 *sse_response([chat_chunk("ok")])]
        async with scripted([steps[:1], steps[1:]]) as server:
            sink, _ = await run_streams(scripted_sut(server.port), count=2)
        _, kind, detail, stream = sink.failures[0]
        assert kind == f"http_{status}" and stream is None
        assert detail is not None and detail.startswith(f"HTTP {status} {phrase}")
        assert "slow down" in detail
        assert 1 in sink.streams  # the connection was kept
    run_bounded(go())


@pytest.mark.parametrize(("finish", "short"), [("stop", 1), ("length", 0)])
def test_a_fixed_length_output_that_stops_early_is_counted(finish: str, short: int) -> None:
    async def go() -> None:
        async with scripted([sse_response([chat_chunk("a"), chat_chunk("b", finish=finish)])]) \
                as server:
            target = scripted_sut(server.port)
            sink, _ = await run_streams(target, prompt=Prompt("p", 1, 3, fixed_output=True))
        assert sink.streams[0][1].finish_reason == finish  # 2 of the 3 tokens asked
        assert target.describe()["fixed_output_short"] == short
        body = json.loads(server.served.requests[0].split(b"\r\n\r\n", 1)[1])
        assert body["ignore_eos"] is True and body["min_tokens"] == 3
    run_bounded(go())


def test_a_one_token_output() -> None:
    async def go() -> None:
        async with scripted([sse_response([chat_chunk("Yes", finish="stop")])]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        stream = sink.streams[0][1]
        assert stream.chunk_tokens == [1] and stream.first_answer == 0
    run_bounded(go())


@pytest.mark.parametrize("usage", [True, False])
def test_completions_endpoint(usage: bool) -> None:
    async def go() -> None:
        events = [completion_chunk(" The"), completion_chunk(" end", finish="length")]
        if usage:
            events.append(completion_chunk(choices=[], usage={"prompt_tokens": 1,
                                                             "completion_tokens": 2}))
        async with scripted([sse_response(events)]) as server:
            sink, _ = await run_streams(scripted_sut(server.port, "&endpoint=completions"))
        stream = sink.streams[0][1]
        assert stream.chunk_tokens == [1, 1] and stream.first_answer == 0
        assert stream.server_output_tokens == (2 if usage else None)
        request = server.served.requests[0]
        assert request.startswith(b"POST /v1/completions HTTP/1.1")
        assert json.loads(request.split(b"\r\n\r\n", 1)[1])["prompt"] == "hello"
    run_bounded(go())


def test_the_fast_path_reads_a_long_stream_and_escaped_text_alike() -> None:
    async def go() -> None:
        texts = [" w"] * 50 + ['"q"', "a\\b", " é", "\n"] + [" w"] * 10
        async with scripted([sse_response([chat_chunk(t) for t in texts])]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        stream = sink.streams[0][1]
        assert len(stream.chunk_ns) == len(texts) and all(n >= 1 for n in stream.chunk_tokens)
        assert stream.client_tokens == sum(stream.chunk_tokens)
    run_bounded(go())


def test_streams_past_the_cap_wait_for_a_connection() -> None:
    async def go() -> None:
        scripts = [sse_response([chat_chunk("a"), chat_chunk("b")], gap_s=0.05)
                   for _ in range(3)]
        async with scripted(scripts) as server:
            sink, issued = await run_streams(scripted_sut(server.port), count=3)
        ends = sorted(done for done, _ in sink.streams.values())
        firsts = sorted(stream.chunk_ns[0] for _, stream in sink.streams.values())
        assert firsts[1] >= ends[0] and firsts[2] >= ends[1]  # one at a time
        assert max(issued.values()) < ends[0]  # all were issued at once
    run_bounded(go())


def test_api_key_from_the_environment_and_extra_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_WIRE_TEST_KEY", "sk-test")

    async def go() -> None:
        async with scripted([sse_response([chat_chunk("a")])]) as server:
            await run_streams(scripted_sut(server.port, "&api_key_env=LLM_WIRE_TEST_KEY"
                                               "&extra=%7B%22temperature%22%3A0%7D"))
        request = server.served.requests[0]
        assert b"\r\nAuthorization: Bearer sk-test\r\n" in request
        assert json.loads(request.split(b"\r\n\r\n", 1)[1])["temperature"] == 0
    run_bounded(go())


@pytest.mark.parametrize(("options", "message"), [
    ("&api_key_env=LLM_WIRE_SURELY_UNSET", "not set"), ("&endpoint=embed", "chat or completions"),
    ("&extra=[1]", "JSON object"), ("&tokenizer=gpt9", "approx, bytes"),
    ("&colour=red", "unknown key"),
])
def test_bad_options_are_spec_errors(options: str, message: str) -> None:
    with pytest.raises(SutSpecError, match=message):
        scripted_sut(1, options)


def test_a_query_of_several_samples_reports_each_stream_then_the_query() -> None:
    async def go() -> None:
        scripts = [sse_response([chat_chunk("a"), chat_chunk("b")]) for _ in range(3)]
        async with scripted(scripts) as server:
            target = OpenAISut.from_spec(f"openai://127.0.0.1:{server.port}/m?max_in_flight=2")
            sink = Collected(expected=1)
            target.use_prompts(Prompts(Prompt("p", 1, 2)))
            await target.start(sink, None)  # type: ignore[arg-type]
            target.issue(7, np.array([0, 1, 2]))
            await asyncio.wait_for(sink.finished.wait(), 10)
            await target.stop()
        assert len(sink.samples[7]) == 3 and all(len(s.chunk_ns) == 2 for s in sink.samples[7])
        assert sink.queries[7] == max(s.chunk_ns[-1] for s in sink.samples[7])
    run_bounded(go())


@pytest.mark.parametrize("eol", [b"\n", b"\r\n"])
def test_many_chunks_in_one_read_take_the_bulk_paths(eol: bytes) -> None:
    """Hundreds of one-event chunks per write (split mid-chunk), usage and [DONE] after them:
    the whole-chunk and whole-event paths (LF), or the byte-wise ones (CRLF), agree."""
    async def go() -> None:
        texts = [f" w{i % 7}" for i in range(300)]
        events = [chat_chunk("", role=True)] + [chat_chunk(t) for t in texts] + [
            chat_chunk(choices=[], usage={"prompt_tokens": 1, "completion_tokens": 600})]
        body = b"".join(chunk(b"data: " + json.dumps(e).encode() + eol + eol) for e in events)
        body += chunk(b"data: [DONE]" + eol + eol) + chunk(b"")
        third = len(body) // 3
        steps = [head(), body[:third], 0.03, body[third:2 * third], 0.03, body[2 * third:]]
        async with scripted([steps]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        stream = sink.streams[0][1]
        assert len(stream.chunk_ns) == 300 and stream.first_answer == 0
        assert stream.chunk_tokens == [2] * 300 and stream.client_tokens == 600
        assert stream.server_output_tokens == 600
        assert len(set(stream.chunk_ns)) == 3  # one stamp per read
    run_bounded(go())


def test_a_chunk_size_that_lies_is_a_protocol_error() -> None:
    async def go() -> None:
        good = b"".join(chunk(event(chat_chunk(" a"))) for _ in range(20))
        bad = good.replace(b"%x\r\n" % len(event(chat_chunk(" a"))), b"ff\r\n", 1)
        async with scripted([[head(), bad]]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        _, kind, detail, _ = sink.failures[0]
        assert kind == "protocol_error" and detail is not None and "CRLF" in detail
    run_bounded(go())


@pytest.mark.parametrize("quoted", [False, True])
def test_one_read_learns_the_template_mid_way_and_stops_at_an_in_band_error(quoted: bool) -> None:
    """The whole body in one write: the role chunk and the first text chunk are read one
    event at a time (the second teaches the bulk path its template, unless every text holds
    a quote, which none can teach), the rest in bulk up to the error, which fails the stream
    with the chunks before it kept."""
    async def go() -> None:
        texts = [f' "w{i % 5}"' if quoted else f" w{i % 5}" for i in range(200)]
        error = {"error": {"message": "boom", "type": "InternalServerError", "code": 500}}
        events = [chat_chunk("", role=True)] + [chat_chunk(t) for t in texts] + [
            error, chat_chunk(" late")]
        body = b"".join(chunk(event(e)) for e in events) + chunk(b"data: [DONE]\n\n") + chunk(b"")
        async with scripted([[head(), body]]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        _, kind, detail, stream = sink.failures[0]
        assert kind == "stream_error" and detail is not None and "boom" in detail
        assert stream is not None and len(stream.chunk_ns) == 200 and stream.first_answer == 0
        assert stream.client_tokens == sum(stream.chunk_tokens) >= 200
    run_bounded(go())


@pytest.mark.parametrize("size_line", [b"%X", b"%04x"])
def test_bulk_reads_take_uppercase_and_zero_padded_chunk_sizes(size_line: bytes) -> None:
    """Size lines outside the common lowercase spelling still read in bulk reads."""
    async def go() -> None:
        events = [event(chat_chunk(f" w{i % 3}")) for i in range(100)]
        body = b"".join(size_line % len(e) + b"\r\n" + e + b"\r\n" for e in events)
        body += chunk(b"data: [DONE]\n\n") + chunk(b"")
        async with scripted([[head(), body]]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        stream = sink.streams[0][1]
        assert len(stream.chunk_ns) == 100 and stream.client_tokens == sum(stream.chunk_tokens)
    run_bounded(go())


def test_one_event_a_read_after_the_template_is_learnt() -> None:
    """Events one a read (decode steps): template chunks by the one-event check, a quoted or
    escaped text, a comment and an in-band error through the general path."""
    async def go() -> None:
        texts = [" a", " b", " c", '"q"', " d", "x\\y", " e"]
        error = {"error": {"message": "late failure", "type": "InternalServerError"}}
        steps = sse_response([chat_chunk(t) for t in texts], done=False, gap_s=0.02)[:-1]
        steps[-2:-2] = [0.02, chunk(b": ping\n\n")]
        steps += [0.02, chunk(event(error)), chunk(b"")]
        async with scripted([steps]) as server:
            sink, _ = await run_streams(scripted_sut(server.port))
        _, kind, detail, stream = sink.failures[0]
        assert kind == "stream_error" and detail is not None and "late failure" in detail
        assert stream is not None and len(stream.chunk_ns) == len(texts)
        assert len(set(stream.chunk_ns)) == len(texts) and stream.first_answer == 0
        assert stream.client_tokens == sum(stream.chunk_tokens) >= len(texts)
    run_bounded(go())
