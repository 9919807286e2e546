"""The OIP server fails closed (issue 29, items 6, 7, 9): a non-ASCII Authorization header is a
401 and one log line, JSON nested too deep is a 400, and no JSON answer carries a bare NaN."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import numpy as np
import pytest

import oipwire as p
from sut.server.core import ServerConfig
from sut.server.thread import ServerThread
from sut.service import build_service
from tests.sut.llm.hostile import post

pytestmark = pytest.mark.functional

TOKEN = "sesame"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
ECHO = "import:tests.sut.user_models:echo"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    service = build_service(ECHO, {"workers": "1", "warmup": "1"})
    with ServerThread(service, ServerConfig(http_port=0, grpc_port=0,
                                            auth_token=TOKEN)) as running:
        yield running


def _infer_body(values: list[float], binary_output: bool = False,
                ) -> tuple[bytes, dict[str, str]]:
    tensor = p.InferTensor.from_numpy("x", np.array([values], dtype=np.float32))
    body, headers = p.encode_request(p.InferRequest("", (tensor,), (), {}), binary=False,
                                     binary_outputs=binary_output)
    return body, {**headers, **AUTH}


def test_a_non_ascii_authorization_header_is_401(server: ServerThread,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        body, headers = _infer_body([1, 2, 3, 4])
        answer = post(server.http_url, "/v2/models/echo/infer", body,
                      {**headers, "Authorization": b"Bearer \xe9\xff"})
    assert answer.status == 401
    lines = [r for r in caplog.records if r.name.startswith("sut.")]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
    assert lines[0].exc_info is None and "not ASCII" in lines[0].getMessage()


@pytest.mark.parametrize("path", ["/v2/repository/index", "/v2/models/echo/batcher",
                                  "/v2/models/echo/infer"])
def test_json_nested_too_deep_is_400(server: ServerThread, path: str) -> None:
    answer = post(server.http_url, path, "[" * 100_000 + "]" * 100_000, AUTH)
    assert answer.status == 400, answer.body


def test_no_bare_nan_in_a_json_answer(server: ServerThread) -> None:
    answer = post(server.http_url, "/v2/models/echo/infer",
                  *_infer_body([float("nan"), 1.0, float("inf"), 2.0]))  # parsed strictly
    assert answer.status == 500 and "NaN" in answer.message and "binary" in answer.message
    assert post(server.http_url, "/v2/models/echo/infer",
                *_infer_body([1, 2, 3, 4])).status == 200


def test_non_finite_outputs_travel_as_binary(server: ServerThread) -> None:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(server.http_url)
    conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=30)
    try:
        body, headers = _infer_body([float("nan"), 1.0, float("inf"), 2.0], binary_output=True)
        conn.request("POST", "/v2/models/echo/infer", body=body, headers=headers)
        resp = conn.getresponse()
        raw, length = resp.read(), resp.getheader(p.HEADER_LENGTH)
    finally:
        conn.close()
    assert resp.status == 200
    json.loads(raw[:int(length or 0)])
    out = p.decode_response(raw, length).outputs[0].data
    assert np.isnan(out[0, 0]) and np.isinf(out[0, 2]) and out[0, 1] == 2.0
