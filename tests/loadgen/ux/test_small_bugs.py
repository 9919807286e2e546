"""#30's smaller bugs: `loadgen report` of a mistyped directory fails instead of rebuilding
its parent's report; `http://` to a gRPC port says so; a URL option typo gets a
did-you-mean; `calibrate` on a busy host stores no ceiling of 0."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from loadgen.adapters.registry import make_sut
from loadgen.adapters.wire.fasthttp import fetch, request_bytes
from loadgen.api import run_test
from loadgen.cli.main import main
from loadgen.errors import SutSpecError
from loadgen.plan.settings import load_settings


def test_report_of_a_typo_fails_and_leaves_the_parent_alone(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_test(load_settings(None, ["preset='dev'", "min_duration_s=0.3", "min_query_count=20",
                                  "target_latency_ms=50", "energy='off'"]), "null",
             out_dir=tmp_path)
    assert not (tmp_path / "report.html").exists()
    assert main(["report", str(tmp_path / "typo")]) != 0
    assert "typo: no such run" in capsys.readouterr().err
    assert not (tmp_path / "report.html").exists()
    assert main(["report", str(tmp_path)]) == 0 and (tmp_path / "report.html").is_file()


SETTINGS_FRAME = b"\x00\x00\x06\x04\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x64"


async def _fetch_from(answer: bytes) -> str:
    """What fetch says of a server (on 127.0.0.1) that writes `answer` and closes."""
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")  # the request, then the answer, then close
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await fetch("127.0.0.1", port, request_bytes("GET", "/v2/health/ready",
                                                     f"127.0.0.1:{port}", {}), None, 5.0)
    except ValueError as exc:
        return str(exc)
    finally:
        server.close()
        await server.wait_closed()
    return "no error"


def test_http_to_a_grpc_port_says_it_looks_like_grpc() -> None:
    said = asyncio.run(_fetch_from(SETTINGS_FRAME))
    assert "looks like a gRPC port" in said and "grpc://" in said
    said = asyncio.run(_fetch_from(b"garbage"))
    assert "closed after 7 bytes" in said and "gRPC" not in said


def test_a_url_option_typo_names_the_closest() -> None:
    with pytest.raises(SutSpecError, match="did you mean connections"):
        make_sut("http://127.0.0.1:1/m?conections=2")


def test_calibrate_stores_no_ceiling_of_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    from loadgen.campaigns import calibrate

    monkeypatch.setattr(calibrate, "calibrate", lambda *a, **k: {"ceiling_qps": 0.0})
    out = tmp_path / "calibration.json"
    assert main(["calibrate", "--sut", "null", "--out", str(out)]) == 1
    assert "nothing stored" in capsys.readouterr().err and not out.exists()
