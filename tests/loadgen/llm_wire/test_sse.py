"""The SSE parser: events split across reads, several in one read, comments, line endings."""

from __future__ import annotations

import pytest

from loadgen.adapters.wire.sse import MAX_EVENT, SseParser


def feed_all(parts: list[bytes]) -> list[list[bytes]]:
    parser = SseParser()
    return [parser.feed(part) for part in parts]


def test_one_event_per_read() -> None:
    assert feed_all([b"data: a\n\n", b"data: b\n\n"]) == [[b"a"], [b"b"]]


def test_several_events_in_one_read() -> None:
    assert feed_all([b"data: a\n\ndata: b\n\ndata: c\n\n"]) == [[b"a", b"b", b"c"]]


@pytest.mark.parametrize("cut", range(1, 9))
def test_an_event_split_anywhere_comes_out_at_the_read_that_completes_it(cut: int) -> None:
    raw = b"data: {}\n\n"
    assert feed_all([raw[:cut], raw[cut:]]) == [[], [b"{}"]]


def test_comments_and_other_fields_are_skipped() -> None:
    raw = b": keep-alive\n\nevent: message\nid: 7\nretry: 10\ndata: x\n\n:ping\n\n"
    assert feed_all([raw]) == [[b"x"]]


def test_several_data_lines_join_with_lf_and_no_space_is_allowed() -> None:
    assert feed_all([b"data:a\ndata: b\ndata\n\n"]) == [[b"a\nb\n"]]


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_every_line_ending(eol: bytes) -> None:
    """A CR ending a read is held until the next read shows whether an LF follows."""
    raw = b"data: a" + eol + eol + b": c" + eol + eol + b"data: b" + eol + eol
    assert [e for out in feed_all([raw, b"\n"]) for e in out] == [b"a", b"b"]


def test_a_crlf_split_between_reads_is_one_line_ending() -> None:
    assert feed_all([b"data: a\r", b"\n\r", b"\ndata: b\r\n\r\n"]) == [[], [], [b"a", b"b"]]


def test_done_marker_is_an_ordinary_payload() -> None:
    assert feed_all([b"data: [DONE]\n\n"]) == [[b"[DONE]"]]


def test_an_event_without_data_yields_nothing_and_blank_lines_are_harmless() -> None:
    assert feed_all([b"event: ping\n\n\n\n\ndata: z\n\n"]) == [[b"z"]]


def test_an_endless_event_is_an_error() -> None:
    parser = SseParser()
    with pytest.raises(ValueError, match="longer than"):
        parser.feed(b"data: " + b"x" * (MAX_EVENT + 1))
