"""The HTTP/REST server over a loopback socket: every endpoint, JSON and binary tensors."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
import torch

import oipwire as p
from loadgen.adapters.batcher_knobs import batcher_knobs
from loadgen.campaigns.sweep import parse_axis, run_sweep
from loadgen.errors import SutError
from loadgen.plan.settings import load_settings
from sut.models import load_model
from sut.server.core import ServerConfig
from sut.server.thread import ServerThread
from sut.service import build_service
from tests.fairness import skip_if_host_busy

pytestmark = pytest.mark.functional

INFER = "/v2/models/mlp/infer"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerThread]:
    service = build_service("mlp", {"max_batch_size": "8", "warmup": "1"})
    with ServerThread(service, ServerConfig(http_port=0, grpc_port=0)) as running:
        yield running


def call(server: ServerThread, method: str, path: str, body: bytes | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh connection: status, headers, body."""
    url = urlsplit(server.http_url)
    conn = http.client.HTTPConnection(url.hostname or "", url.port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read()
    finally:
        conn.close()


def get_json(server: ServerThread, path: str) -> tuple[int, Any]:
    status, _, body = call(server, "GET", path)
    return status, json.loads(body)


def direct(x: np.ndarray) -> np.ndarray:
    """The model called directly, without the server or the batcher."""
    module = load_model("mlp", {}, 0).module
    with torch.no_grad():
        out: np.ndarray = module(torch.from_numpy(x.copy())).numpy()
    return out


def inputs(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, 256)).astype(np.float32)


def infer(server: ServerThread, x: np.ndarray, binary: bool, binary_outputs: bool,
          **params: p.ParamValue) -> tuple[int, p.InferResponse | str]:
    req = p.InferRequest("req-7", (p.InferTensor.from_numpy("input", x),), (), dict(params))
    body, headers = p.encode_request(req, binary=binary, binary_outputs=binary_outputs)
    status, got, data = call(server, "POST", INFER, body, headers)
    if status != 200:
        return status, json.loads(data)["error"]
    return status, p.decode_response(data, got.get(p.HEADER_LENGTH))


def json_case(name: str, datatype: str, shape: list[int], count: int, **extra: Any) -> bytes:
    """A JSON request with `count` values for one input."""
    tensor = {"name": name, "datatype": datatype, "shape": shape, "data": [0.5] * count}
    return json.dumps({"inputs": [tensor], **extra}).encode()


def binary_case(shape: list[int], size: int, sent: int) -> tuple[bytes, dict[str, str]]:
    """A binary-data request claiming `size` bytes for `input` and carrying `sent`."""
    doc = {"inputs": [{"name": "input", "datatype": "FP32", "shape": shape,
                       "parameters": {p.BINARY_DATA_SIZE: size}}]}
    header = json.dumps(doc).encode()
    return header + bytes(sent), {p.HEADER_LENGTH: str(len(header))}


def test_health_and_server_metadata(server: ServerThread) -> None:
    assert get_json(server, "/v2/health/live") == (200, {"live": True})
    assert get_json(server, "/v2/health/ready") == (200, {"ready": True})
    status, meta = get_json(server, "/v2")
    assert status == 200 and meta["name"] == "loadgen-sut"
    assert p.EXTENSION_BINARY_TENSOR_DATA in meta["extensions"]


@pytest.mark.parametrize("path", ["/v2/models/mlp", "/v2/models/mlp/versions/1"])
def test_model_metadata_and_ready(server: ServerThread, path: str) -> None:
    status, meta = get_json(server, path)
    assert status == 200
    assert meta == {"name": "mlp", "versions": ["1"], "platform": "pytorch",
                    "inputs": [{"name": "input", "datatype": "FP32", "shape": [-1, 256]}],
                    "outputs": [{"name": "output", "datatype": "FP32", "shape": [-1, 10]}]}
    assert get_json(server, f"{path}/ready") == (200, {"name": "mlp", "ready": True})


@pytest.mark.parametrize("path", ["/v2/models/nope", "/v2/models/mlp/versions/2",
                                  "/v2/models/nope/ready", "/v2/models/mlp/versions/9/stats"])
def test_unknown_model_or_version_is_404(server: ServerThread, path: str) -> None:
    status, doc = get_json(server, path)
    assert status == 404 and ("unknown model" in doc["error"] or "no version" in doc["error"])


@pytest.mark.parametrize(("binary", "binary_outputs"),
                         [(False, False), (True, True), (False, True), (True, False)])
def test_outputs_equal_a_direct_call_of_the_model(server: ServerThread, binary: bool,
                                                   binary_outputs: bool) -> None:
    x = inputs(3, seed=int(binary) * 2 + int(binary_outputs))
    status, resp = infer(server, x, binary, binary_outputs)
    assert status == 200 and isinstance(resp, p.InferResponse)
    assert (resp.model_name, resp.model_version, resp.id) == ("mlp", "1", "req-7")
    (out,) = resp.outputs
    assert (out.name, out.datatype, out.shape) == ("output", "FP32", (3, 10))
    np.testing.assert_allclose(out.data, direct(x), rtol=1e-5, atol=1e-6)


def test_binary_data_per_output_and_versioned_path(server: ServerThread) -> None:
    x = inputs(1)
    doc = {"id": "x", "inputs": [{"name": "input", "datatype": "FP32", "shape": [1, 256],
                                  "data": x.ravel().tolist()}],
           "outputs": [{"name": "output", "parameters": {"binary_data": True}}]}
    status, headers, body = call(server, "POST", "/v2/models/mlp/versions/1/infer",
                                 json.dumps(doc).encode(), {"Content-Type": "application/json"})
    assert status == 200 and headers["Content-Type"] == p.BINARY_CONTENT_TYPE
    length = int(headers[p.HEADER_LENGTH])
    header = json.loads(body[:length])
    assert header["outputs"][0]["parameters"][p.BINARY_DATA_SIZE] == 40 == len(body) - length
    got = np.frombuffer(body[length:], dtype="<f4").reshape(1, 10)
    np.testing.assert_allclose(got, direct(x), rtol=1e-5, atol=1e-6)


def test_timings_come_back_per_request(server: ServerThread) -> None:
    status, resp = infer(server, inputs(2), True, True)
    assert status == 200 and isinstance(resp, p.InferResponse)
    params = {k: v for k, v in resp.parameters.items() if type(v) is int and v >= 0}
    assert set(params) == set(resp.parameters) == set(p.TIMING_PARAMETERS)
    assert params[p.BATCH_SIZE] >= 2
    assert params[p.SERVER_TOTAL_NS] >= params[p.QUEUE_NS] + params[p.COMPUTE_NS]


def test_priority_and_timeout_parameters(server: ServerThread) -> None:
    status, _ = infer(server, inputs(1), True, True, priority=1, timeout=5_000_000)
    assert status == 200
    status, message = infer(server, inputs(1), True, True, priority=-1)
    assert status == 400 and "priority" in str(message)
    status, message = infer(server, inputs(1), True, True, timeout="soon")
    assert status == 400 and "timeout" in str(message)


def test_stats_and_metrics(server: ServerThread) -> None:
    _, before = get_json(server, "/v2/models/mlp/stats")
    for rows in (1, 2, 3):
        assert infer(server, inputs(rows), True, True)[0] == 200
    status, after = get_json(server, "/v2/models/mlp/stats")
    assert status == 200
    stats, old = after["model_stats"][0], before["model_stats"][0]
    assert stats["name"] == "mlp" and stats["version"] == "1"
    ok = stats["inference_stats"]["success"]["count"]
    assert ok - old["inference_stats"]["success"]["count"] == 3
    assert stats["inference_count"] - old["inference_count"] == 6
    assert stats["inference_stats"]["compute_infer"]["ns"] > 0
    assert sum(b["compute_infer"]["count"] for b in stats["batch_stats"]) == \
        stats["execution_count"]
    status, headers, text = call(server, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert f'sut_requests_total{{model="mlp",outcome="ok"}} {float(ok)}' in text.decode()
    for name in ("sut_queue_depth", "sut_batch_size_bucket", "sut_queue_seconds_bucket",
                 "sut_compute_seconds_count"):
        assert name in text.decode()


@pytest.mark.parametrize(("body", "headers", "words"), [
    (b"{not json", {}, "not valid JSON"),
    (b"[1, 2]", {}, "JSON object"),
    (json_case("input", "FP64", [1, 256], 256), {}, "datatype FP64"),
    (json_case("input", "FP32", [1, 255], 255), {}, "shape [1, 255]"),
    (json_case("x", "FP32", [1, 256], 256), {}, "takes inputs"),
    (json_case("input", "FP32", [1, 256], 1), {}, "needs 256"),
    (json_case("input", "FP32", [0, 256], 0), {}, "batch dim 0"),
    (json_case("input", "FP32", [1, 256], 256, outputs=[{"name": "logits"}]), {},
     "unknown outputs"),
    (*binary_case([1, 256], 1024, 1000), "does not fit"),
    (*binary_case([9, 256], 9216, 9216), "max_batch_size"),
    (*binary_case([1, 256], 1000, 1000), "needs 1024"),
    (b'{"inputs": []}', {p.HEADER_LENGTH: "9999"}, "outside"),
])
def test_malformed_requests_get_400_and_the_server_keeps_serving(
        server: ServerThread, body: bytes, headers: dict[str, str], words: str) -> None:
    status, got, data = call(server, "POST", INFER, body, headers)
    assert status == 400, data
    assert got["Content-Type"].startswith(p.JSON_CONTENT_TYPE)
    assert words in json.loads(data)["error"]
    assert infer(server, inputs(1), True, True)[0] == 200


def post_json(server: ServerThread, path: str, body: bytes) -> tuple[int, Any]:
    status, _, data = call(server, "POST", path, body, {"Content-Type": "application/json"})
    return status, json.loads(data)


def test_batcher_knobs_are_retuned_live(server: ServerThread) -> None:
    status, before = get_json(server, "/v2/models/mlp/batcher")
    assert status == 200 and before["max_batch_size"] == 8
    change = {"max_batch_size": 2, "preferred_batch_sizes": [2]}
    try:
        status, now = post_json(server, "/v2/models/mlp/versions/1/batcher",
                                json.dumps(change).encode())
        assert (status, now) == (200, {**before, **change})
        assert get_json(server, "/v2/models/mlp/batcher") == (200, now)
        status, error = infer(server, inputs(3), True, True)
        assert status == 400 and "max_batch_size=2" in str(error)
        status, out = infer(server, inputs(2), True, True)
        assert status == 200 and isinstance(out, p.InferResponse)
        assert out.parameters[p.BATCH_SIZE] <= 2
    finally:
        assert post_json(server, "/v2/models/mlp/batcher", json.dumps(before).encode()) == (
            200, before)


@pytest.mark.parametrize(("body", "words"), [
    (b"max_batch_size=4", "not JSON"),
    (b"[4]", "want a JSON object"),
    (b"{}", "want a JSON object"),
    (b'{"max_batch_sise": 4}', "max_batch_sise: unknown batcher knob"),
    (b'{"max_batch_size": 0}', "max_batch_size: must be >= 1"),
    (b'{"max_batch_size": 4, "max_queue_delay_us": 1.5}', "max_queue_delay_us: must be an int"),
    (b'{"max_queue_size": true}', "max_queue_size: must be an integer"),
    (b'{"preferred_batch_sizes": [64]}', "preferred_batch_sizes: must be integers in [1, "),
])
def test_a_bad_retune_is_400_and_changes_nothing(server: ServerThread, body: bytes,
                                                 words: str) -> None:
    before = get_json(server, "/v2/models/mlp/batcher")
    status, answer = post_json(server, "/v2/models/mlp/batcher", body)
    assert status == 400 and words in answer["error"]
    assert get_json(server, "/v2/models/mlp/batcher") == before
    assert post_json(server, "/v2/models/nope/batcher", b'{"max_batch_size": 4}')[0] == 404


@pytest.mark.serial  # batch formation against a 5 ms delay; skips on a loaded host
def test_a_sweep_retunes_the_served_batcher_live(server: ServerThread, tmp_path: Path) -> None:
    spec = f"{server.http_url}/mlp"
    before = batcher_knobs(spec)
    assert before == get_json(server, "/v2/models/mlp/batcher")[1]
    with pytest.raises(SutError, match="400 max_batch_size: must be >= 1"):
        batcher_knobs(spec, {"max_batch_size": 0})
    with pytest.raises(SutError, match="404"):
        batcher_knobs(f"{server.http_url}/nope")
    settings = load_settings("scenarios/server.toml", [
        "preset='dev'", "min_duration_s=0.3", "warmup_s=0", "min_query_count=60",
        "target_qps=200", "target_latency_ms=500"])
    doc = run_sweep(settings, spec, [parse_axis("batcher.max_queue_delay_us=0,5000")], 1,
                    tmp_path).as_dict()
    assert [p["batcher"]["max_queue_delay_us"] for p in doc["points"]] == [0, 5000]
    results = [json.loads((tmp_path / p["launch_dirs"][0] / "result.json").read_text())
               for p in doc["points"]]
    formation = [r["components_ns"]["batch_formation"]["p50"] for r in results]
    if formation[1] < 1_000_000:  # requests piled up behind a busy host fill their batches
        skip_if_host_busy(results[1], f"batch formation p50 {formation[1] / 1e6:.2f} ms with "
                          "a 5 ms queue delay")
    assert 1_000_000 <= formation[1]  # a lone request waits out the delay
    if formation[0] >= 1_000_000:
        skip_if_host_busy(results[0], f"batch formation p50 {formation[0] / 1e6:.2f} ms with "
                          "no queue delay")
    assert formation[0] < 1_000_000
    assert batcher_knobs(spec) == before


def test_unknown_route_and_method(server: ServerThread) -> None:
    status, _, data = call(server, "GET", "/v2/nowhere")
    assert status == 404 and "/v2/nowhere" in json.loads(data)["error"]
    status, headers, data = call(server, "GET", INFER)
    assert status == 405 and "POST" in headers["Allow"] and json.loads(data)["error"]


TRITON_CHECK = """
import json
import queue
import sys
import numpy as np
import tritonclient.grpc as tg
import tritonclient.http as th
x = np.asarray(json.loads(sys.argv[3]), dtype=np.float32)
h = th.InferenceServerClient(sys.argv[1])
assert h.is_server_live() and h.is_server_ready() and h.is_model_ready("mlp")
assert h.get_model_metadata("mlp")["inputs"][0]["shape"] == [-1, 256]
outs = []
for binary in (True, False):
    i = th.InferInput("input", list(x.shape), "FP32")
    i.set_data_from_numpy(x, binary_data=binary)
    o = th.InferRequestedOutput("output", binary_data=not binary)
    outs.append(h.infer("mlp", [i], outputs=[o], request_id="t").as_numpy("output"))
c = h.get_model_config("mlp")
assert (c["max_batch_size"], c["input"][0]["dims"], c["input"][0]["data_type"]) == (
    8, [256], "TYPE_FP32")
assert h.get_inference_statistics("mlp")["model_stats"][0]["inference_count"] >= 2 * len(x)
assert h.get_model_repository_index() == [{"name": "mlp", "version": "1", "state": "READY"}]
g = tg.InferenceServerClient(sys.argv[2])
assert g.is_server_live() and g.is_server_ready() and g.is_model_ready("mlp")
assert list(g.get_model_metadata("mlp").inputs[0].shape) == [-1, 256]
i = tg.InferInput("input", list(x.shape), "FP32")
i.set_data_from_numpy(x)
outs.append(g.infer("mlp", [i], client_timeout=10).as_numpy("output"))
gc = g.get_model_config("mlp").config
assert (gc.max_batch_size, list(gc.input[0].dims), gc.input[0].data_type) == (8, [256], 11)
gs = g.get_inference_statistics("mlp").model_stats[0]
assert gs.name == "mlp" and gs.inference_count >= 3 * len(x), gs
assert gs.inference_stats.success.count >= 3, gs
assert [m.state for m in g.get_model_repository_index().models] == ["READY"]
got = queue.Queue()
g.start_stream(callback=lambda result, error: got.put((result, error)))
for rid in ("s1", "s2"):
    g.async_stream_infer("mlp", [i], request_id=rid)
answers = [got.get(timeout=30) for _ in range(2)]
g.stop_stream()
assert all(e is None for _, e in answers), answers
assert sorted(r.get_response().id for r, _ in answers) == ["s1", "s2"]
outs.append(answers[0][0].as_numpy("output"))
print(json.dumps([o.tolist() for o in outs]))
"""


def test_tritonclient_interoperates(server: ServerThread) -> None:
    """Triton's own client on both protocols, from an interpreter that has it installed:
    infer, metadata, config, statistics, repository index and (gRPC) a stream.

    tritonclient[grpc] needs protobuf < 7 (ours is pinned at 7) and [http] brings gevent,
    so it is not a dependency: set LOADGEN_TRITON_PYTHON to a python with it to run this.
    """
    python = os.environ.get("LOADGEN_TRITON_PYTHON")
    if not python:
        pytest.skip("set LOADGEN_TRITON_PYTHON to a python with tritonclient[http,grpc]")
    x = inputs(2, seed=5)
    done = subprocess.run([python, "-c", TRITON_CHECK, server.http_url.removeprefix("http://"),
                           server.grpc_target, json.dumps(x.tolist())],
                          capture_output=True, text=True, timeout=120, check=True)
    for got in json.loads(done.stdout):
        np.testing.assert_allclose(np.array(got, dtype=np.float32), direct(x),
                                   rtol=1e-5, atol=1e-6)
