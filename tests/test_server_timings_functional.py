"""The server's timings reach a remote run whole, over HTTP and over gRPC.

`loadgen serve --model mlp` runs as a subprocess on loopback (port 0, bounded start,
stopped by its pid). One raw infer answer is read over each protocol, then a short run
goes through each adapter: every timing parameter the server sent must be a component of
the run (`<name>_ns` recorded as `<name>`), beside the client's own `network`. A
regression test: the clients once scanned a shorter list than the server sent, so remote
runs lost `h2d` and `d2h` (and the server did not send `postprocess` at all).
"""

from __future__ import annotations

import http.client
from collections.abc import Iterator

import grpc
import numpy as np
import pytest

import oipwire as p
from loadgen.api import run_test
from loadgen.plan.settings import load_settings
from oipwire import timing
from oipwire.proto import grpc_predict_v2_pb2 as pb
from oipwire.proto import grpc_predict_v2_pb2_grpc as pb_grpc
from tests.served import serve

pytestmark = pytest.mark.functional

START_TIMEOUT_S = 120
RUN = ["preset='dev'", "scenario='Server'", "target_qps=100", "target_latency_ms=500",
       "warmup_s=0.2", "min_duration_s=0.5", "min_query_count=30"]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[str, str]]:
    """(http host:port, grpc host:port) of `loadgen serve --model mlp`."""
    with serve("mlp,workers=1", START_TIMEOUT_S) as server:
        yield server.http, server.grpc


def _http_parameters(address: str) -> dict[str, p.ParamValue]:
    host, port = address.rsplit(":", 1)
    x = np.ones((1, 256), dtype=np.float32)
    body, headers = p.encode_request(p.InferRequest(inputs=(p.InferTensor.from_numpy("input", x),)))
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("POST", "/v2/models/mlp/infer", body, headers)
        answer = conn.getresponse()
        data = answer.read()
        assert answer.status == 200, data
        return p.decode_response(data, answer.getheader(p.HEADER_LENGTH)).parameters
    finally:
        conn.close()


def _grpc_parameters(address: str) -> dict[str, p.ParamValue]:
    msg = pb.ModelInferRequest(model_name="mlp")
    msg.inputs.add(name="input", datatype="FP32", shape=[1, 256])
    msg.raw_input_contents.append(np.ones((1, 256), dtype=np.float32).tobytes())
    with grpc.insecure_channel(address) as channel:
        resp = pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(msg, timeout=30)
    return {k: getattr(v, v.WhichOneof("parameter_choice")) for k, v in resp.parameters.items()}


@pytest.mark.parametrize("scheme", ["http", "grpc"])
def test_every_server_timing_is_a_component_of_the_run_functional(
        served: tuple[str, str], scheme: str) -> None:
    address = served[0] if scheme == "http" else served[1]
    params = (_http_parameters if scheme == "http" else _grpc_parameters)(address)
    assert set(params) == set(timing.TIMING_PARAMETERS)  # the server sends the whole table
    sent = {timing.PARAMETER_COMPONENTS[key] for key in params} - {timing.BATCH_SIZE}
    stats = run_test(load_settings(None, RUN), f"{scheme}://{address}/mlp").stats
    assert sent | {"network"} <= set(stats.components_ns), (scheme, sorted(stats.components_ns))
    assert stats.batch_sizes  # batch_size is recorded too, as the batch size distribution
