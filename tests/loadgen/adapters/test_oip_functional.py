"""Both OIP adapters (HTTP and gRPC) end to end through the engine, against the loopback echo
server: the scenarios they share, one test each, run once per wire (`oiprun.WIRES`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from loadgen.api import run_loop
from loadgen.errors import SutError
from tests.fairness import skip_if_host_unfair
from tests.loadgen.adapters.oiprun import COMPONENTS, OFFLINE, SERVER, WIRES, Wire, run
from tests.oipwire.oip_echo import Echo, spawn

pytestmark = pytest.mark.functional

BY_WIRE = pytest.mark.parametrize("wire", WIRES, ids=[w.name for w in WIRES])


@pytest.fixture(scope="module")
def echo() -> Iterator[Echo]:
    with spawn(sleep_ms=1) as server:
        yield server


@pytest.mark.serial  # VALID needs the harness on schedule; skips on a loaded host
@BY_WIRE
def test_server_scenario_valid_with_components_functional(echo: Echo, wire: Wire) -> None:
    result = run(wire.sut(wire.spec(echo, wire.busy)), SERVER)
    skip_if_host_unfair(result)
    assert result["valid"], result["reasons"]
    assert COMPONENTS <= set(result["components_ns"])
    assert result["components_ns"]["compute"]["p50"] >= 900_000
    assert result["sut"]["protocol"] == wire.name and result["sut"]["binary"] is True
    assert result["errors"] == 0 and result["batch_sizes"] == {"1": result["queries"]}


@BY_WIRE
def test_offline_valid_in_batches_functional(echo: Echo, wire: Wire) -> None:
    result = run(wire.sut(wire.spec(echo, wire.batches)), OFFLINE)
    assert result["valid"], result["reasons"]
    assert result["samples"] == 11000 and set(result["batch_sizes"]) == {"8"}
    assert COMPONENTS <= set(result["components_ns"])


@BY_WIRE
def test_typed_bodies_token_and_multistream_functional(wire: Wire) -> None:
    with spawn(token="s3cret") as server:
        ok = run(wire.sut(wire.spec(server, "binary=0&token=s3cret")),
                 [*SERVER, "scenario='MultiStream'", "min_query_count=50", "min_duration_s=0.3"])
        assert ok["valid"], ok["reasons"]
        assert ok["batch_sizes"] == {"8": ok["queries"]}
        bad = run(wire.sut(wire.spec(server, "token=wrong")), [*SERVER, "min_duration_s=0.3"])
    assert set(bad["errors_by_kind"]) == {wire.unauthorized} and not bad["valid"]


@pytest.mark.parametrize(("wire", "failing", "kind", "says"), [
    (WIRES[0], {"fail_status": 503}, "http_503", "HTTP 503 "),
    (WIRES[0], {"fail_status": 429}, "http_429", "HTTP 429 "),
    (WIRES[1], {"fail_code": "UNAVAILABLE"}, "grpc_UNAVAILABLE", "UNAVAILABLE: "),
    (WIRES[1], {"fail_code": "RESOURCE_EXHAUSTED"}, "grpc_RESOURCE_EXHAUSTED",
     "RESOURCE_EXHAUSTED: "),
], ids=["http-503", "http-429", "grpc-UNAVAILABLE", "grpc-RESOURCE_EXHAUSTED"])
def test_errors_counted_by_kind_functional(wire: Wire, failing: dict[str, Any], kind: str,
                                           says: str) -> None:
    with spawn(fail_every=4, **failing) as server:
        result = run(wire.sut(wire.spec(server, "")), [*SERVER, "warmup_s=0"])
    assert set(result["errors_by_kind"]) == {kind} and not result["valid"]
    assert abs(result["errors"] / (result["queries"] + result["errors"]) - 0.25) < 0.05
    assert result["unfinished"] == 0
    messages = result["errors_detail"][kind]["messages"]  # the status (line) and its message
    assert messages and all(m.startswith(says) for m in messages), messages


@BY_WIRE
def test_query_timeout_functional(wire: Wire) -> None:
    with spawn(hang_every=20) as server:
        result = run(wire.sut(wire.spec(server, "timeout_ms=100")), SERVER)
    assert set(result["errors_by_kind"]) == {"timeout"} and result["unfinished"] == 0
    messages = result["errors_detail"]["timeout"]["messages"]
    assert messages and all(m.startswith(wire.timeout_says) for m in messages), messages
    # min_query_count counts every query that ended, timed out or not; on a busy host the
    # 100 ms timeout also catches answers that were merely late, so only the sum is fixed
    assert result["errors"] >= 10 and result["queries"] + result["errors"] >= 200


@BY_WIRE
def test_server_killed_mid_run_functional(wire: Wire) -> None:
    with spawn(sleep_ms=1) as server:
        started = time.monotonic()
        result = run(wire.sut(wire.spec(server, wire.busy)), [*SERVER, "min_duration_s=1.5"],
                     during=server.proc.kill)
        elapsed = time.monotonic() - started
    errors = result["errors_by_kind"]
    assert not result["valid"] and result["unfinished"] == 0 and elapsed < 9
    assert set(errors) <= wire.server_lost and errors.get(wire.refused), errors
    assert result["queries"] >= 20 and result["errors"] >= 100  # killed after 20 answers


@BY_WIRE
def test_start_fails_cleanly_functional(wire: Wire) -> None:
    async def start(spec: str) -> None:
        await wire.sut(spec).start(None, None)  # type: ignore[arg-type]

    with spawn() as server:
        with pytest.raises(SutError, match="not ready"):
            run_loop(start(wire.spec(server, "").replace("/echo", "/nope")))
        spec, gone = wire.spec(server, ""), wire.gone(server)
    with pytest.raises(SutError, match=gone):
        run_loop(start(spec))
