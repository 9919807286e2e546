"""When the server's token total differs from the client's count, the total is spread over
the chunks: a request yields N - 1 ITL values (N the server's), summing to E2E - TTFT; and
the send stamp is the one on the wire when the SUT queued the request for a connection."""

from __future__ import annotations

import pytest

from loadgen.adapters.tokens import TokenStream
from loadgen.record.collect import Collector
from loadgen.record.histograms import summary_ns
from loadgen.record.tally import RunTimes
from loadgen.record.tokens import spread

TIMES = RunTimes(0, 0, 10_000, 10_000, False, 0)


@pytest.mark.parametrize(("total", "weights", "expected"), [
    (12, [1, 1, 1], [4, 4, 4]),
    (10, [1, 1, 1], [3, 4, 3]),
    (5, [2, 1, 1], [3, 1, 1]),
    (2, [1, 1, 1, 1], [1, 0, 1, 0]),
    (4, [0, 0], [2, 2]),
])
def test_spread_adds_up_to_the_total_in_proportion(total: int, weights: list[int],
                                                   expected: list[int]) -> None:
    assert spread(total, weights) == expected and sum(expected) == total


def _stream(stamps: list[int], server: int | None) -> TokenStream:
    s = TokenStream()
    for t in stamps:
        s.add(t, 1)
    s.client_tokens, s.server_output_tokens = len(stamps), server
    return s


@pytest.mark.parametrize("server", [12, 3, 2])
def test_a_request_yields_n_minus_one_itl_values_of_the_servers_n(server: int) -> None:
    c = Collector(slo_ns=10**9)
    c.started(0, 0)
    c.issued_query(1, 0, 0, 1, True)
    c.streamed(1, 2000, _stream([1000, 1400, 2000], server))
    tokens = c.tally(TIMES).tokens
    assert tokens is not None
    itl = summary_ns(tokens.histograms["itl_ns"])
    assert itl["count"] == server - 1
    assert abs(itl["mean"] * itl["count"] - (2000 - 1000)) <= itl["count"]  # sum: E2E - TTFT
    assert summary_ns(tokens.histograms["tpot_ns"])["max"] == 1000 // (server - 1)


def test_the_send_stamp_is_taken_on_the_wire_not_at_the_queue() -> None:
    c = Collector(slo_ns=10**9)
    c.started(0, 0)
    c.issued_query(1, 0, 100, 1, True)  # handed to the SUT at 100, waited for a connection
    stream = _stream([1500, 1700], None)
    stream.sent_ns = 1000  # on the wire at 1000
    c.streamed(1, 1700, stream)
    t = c.tally(TIMES)
    assert t.tokens is not None
    assert summary_ns(t.tokens.histograms["ttft_sent_ns"])["max"] == 500
    assert summary_ns(t.tokens.histograms["ttft_ns"])["max"] == 1500  # from schedule: the wait
    assert summary_ns(t.histograms["service_latency_ns"])["max"] == 700
