"""gRPC client throughput: loadgen's OIP adapter against a minimal grpc.aio loop, same server.

A minimal Open Inference Protocol gRPC server (grpc.aio, every call answered with one canned
ModelInferResponse, in a child process) is driven with `--concurrency` calls in flight by:

* loadgen, through the engine: Offline (one query of many single-sample calls, the adapter's
  own throughput) and Server closed loop with that concurrency;
* a minimal grpc.aio client: that many coroutines, each awaiting `stub.ModelInfer(request)`
  in a loop with the same request.

Each client runs `--rounds` times, interleaved; it prints the median calls/s with the range,
and the ratios of the medians to the minimal loop; no pass/fail.

    .venv/bin/python benchmarks/grpc_client.py [--concurrency 64] [--duration 3] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import time
from typing import Any

import grpc  # type: ignore[import-untyped]

from loadgen.adapters.grpc import GrpcSut
from loadgen.api import run_async, run_loop
from loadgen.plan.settings import load_settings
from oipwire.proto import SERVICE_NAME
from oipwire.proto import grpc_predict_v2_pb2 as pb

MODEL = "bench"


def _answers() -> dict[str, bytes]:
    out = pb.ModelInferResponse(model_name=MODEL, model_version="1")
    out.outputs.add(name="y", datatype="FP32", shape=[1, 4])
    out.raw_output_contents.append(bytes(16))
    for key, value in (("queue_ns", 1000), ("batch_formation_ns", 0), ("compute_ns", 2000),
                       ("server_total_ns", 5000), ("batch_size", 1)):
        out.parameters[key].int64_param = value
    meta = pb.ModelMetadataResponse(name=MODEL, versions=["1"], platform="bench")
    meta.inputs.add(name="x", datatype="FP32", shape=[-1, 4])
    meta.outputs.add(name="y", datatype="FP32", shape=[-1, 4])
    return {"ModelInfer": out.SerializeToString(), "ModelMetadata": meta.SerializeToString(),
            "ServerReady": pb.ServerReadyResponse(ready=True).SerializeToString(),
            "ModelReady": pb.ModelReadyResponse(ready=True).SerializeToString()}


def serve(port: multiprocessing.Queue[int]) -> None:
    """The server process: canned answers, bytes in and out (no protobuf work per call)."""
    answers = _answers()

    def handler(answer: bytes) -> Any:
        async def unary(request: bytes, context: Any) -> bytes:
            return answer
        return grpc.unary_unary_rpc_method_handler(unary)

    async def main() -> None:
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(
            SERVICE_NAME, {name: handler(answer) for name, answer in answers.items()})])
        port.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


def loadgen_offline(spec: str, concurrency: int, duration: int, rate: float) -> float:
    """Offline sized to take about `duration` s at `rate` samples/s."""
    settings = load_settings(None, ["preset='dev'", "scenario='Offline'", f"target_qps={rate}",
                                    f"min_duration_s={duration}", "min_query_count=1"])
    sut = GrpcSut.from_spec(f"{spec}?max_in_flight={concurrency}&batch=1")
    return float(run_loop(run_async(settings, sut)).stats.samples_per_s)


def loadgen_closed(spec: str, concurrency: int, duration: int) -> float:
    settings = load_settings(None, [
        "preset='dev'", "scenario='Server'", "arrival='closed'", f"concurrency={concurrency}",
        "target_latency_ms=1000", f"min_duration_s={duration}", "min_query_count=1000"])
    sut = GrpcSut.from_spec(f"{spec}?max_in_flight={concurrency}")
    return float(run_loop(run_async(settings, sut)).stats.qps_completed)


async def minimal(target: str, concurrency: int, duration: int) -> float:
    """The baseline: `concurrency` coroutines awaiting the generated stub in a loop."""
    from oipwire.proto import grpc_predict_v2_pb2_grpc as pb_grpc

    request = pb.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(bytes(16))
    done = 0
    async with grpc.aio.insecure_channel(target) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)  # type: ignore[no-untyped-call]
        await stub.ModelInfer(request)
        end = time.perf_counter() + duration

        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < end:
                await stub.ModelInfer(request)
                done += 1

        start = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(concurrency)))
        return done / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--duration", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    ports: multiprocessing.Queue[int] = ctx.Queue()
    proc = ctx.Process(target=serve, args=(ports,), daemon=True)
    proc.start()
    rounds: dict[str, list[float]] = {"base": [], "offline": [], "closed": []}
    try:
        port = ports.get(timeout=30)
        target, c, d = f"127.0.0.1:{port}", args.concurrency, args.duration
        spec = f"grpc://{target}/{MODEL}"
        print(f"server: 1 grpc.aio process; {c} calls in flight; {d} s per client; "
              f"{args.rounds} rounds, clients interleaved; {os.cpu_count()} CPUs; "
              f"load average {os.getloadavg()[0]:.1f}")
        for _ in range(args.rounds):
            base = run_loop(minimal(target, c, d))
            rounds["base"].append(base)
            rounds["offline"].append(loadgen_offline(spec, c, d, base))
            rounds["closed"].append(loadgen_closed(spec, c, d))
    finally:
        proc.terminate()
        proc.join(5)
    median = {name: statistics.median(values) for name, values in rounds.items()}
    for name, label in (("base", "minimal grpc.aio loop"),
                        ("offline", "loadgen Offline (adapter throughput)"),
                        ("closed", f"loadgen Server closed loop, c={c}")):
        values = rounds[name]
        print(f"{label:38s} {median[name]:8.0f} calls/s  ({min(values):.0f}-{max(values):.0f})"
              f"  {median[name] / median['base']:.2f}x")

if __name__ == "__main__":
    main()
