"""ServerCore without a socket: the timings an infer answer carries are oipwire's vocabulary."""

from __future__ import annotations

import time

import numpy as np

import oipwire as p
from oipwire import timing
from sut.server.core import ServerConfig, ServerCore
from sut.service import InferenceService, build_service
from tests.sut.conftest import run


async def _answer(service: InferenceService) -> p.InferResponse:
    await service.start()
    try:
        core = ServerCore(service, ServerConfig(http_port=0, grpc_port=0))
        x = np.ones((2, 256), dtype=np.float32)
        req = p.InferRequest("r", (p.InferTensor.from_numpy("input", x),))
        return await core.infer(core.model("mlp"), req, time.perf_counter_ns())
    finally:
        await service.stop()


def test_infer_parameters_are_the_timing_vocabulary() -> None:
    resp = run(_answer(build_service("mlp", {"workers": "1", "warmup": "0"})))
    assert set(resp.parameters) == set(timing.TIMING_PARAMETERS)
    assert all(type(v) is int and v >= 0 for v in resp.parameters.values())
    assert resp.parameters[timing.BATCH_SIZE] == 2
    assert timing.components(resp.parameters).keys() == {*timing.COMPONENTS, timing.BATCH_SIZE}
