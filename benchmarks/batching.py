"""Dynamic batching on CPU or GPU: what the serving harness costs, and what batching buys.

Prints, in one run:
0. this machine's thread wake-up round trip, which sets what each hand-off between the
   SUT's threads (the GIL between workers, a queue between a submitter and a worker)
   costs: 75-80 us on the 2-vCPU Firecracker VM used in development, whose kernel
   command line turns guest halt-polling off, so a waiting vCPU halts at once, and what
   the harness's own code costs per batch, on a model that computes nothing;
1. for each built-in model (mlp, cnn, transformer) and max batch (32, then 256),
   Offline throughput of the SUT against the raw model's own throughput at that batch
   with the same thread layout (target >= 0.9x), alternated over `--rounds` rounds: the
   median ratio and its range, and the time the SUT adds per batch in each worker. That
   time is a few hundred us (hand-offs of the GIL between workers more than the
   harness's own code), so the ratio is lowest where a batch computes fastest (mlp at
   batch 32: ~0.25 ms);
2. the highest Server QPS meeting a p99 SLO with dynamic batching (`--model`, max
   batch 32) against the same SUT with `max_batch_size=1` (target >= 3x), by find-peak.

With `--device cuda` every SUT and raw-model figure runs on the GPUs (one worker per
GPU; the raw model is fed inputs already on the GPU and synchronised after each
batch), at `--precision` fp32, fp16 or bf16; the first line names the GPU and driver.

    .venv/bin/python benchmarks/batching.py [--models mlp,cnn,transformer] [--rounds 3]
        [--offline-batches 32,256] [--layout 1x2] [--no-server]
        [--model mlp] [--slo-ms 20] [--budget-s 150] [--device cpu|cuda] [--precision fp32]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from loadgen.adapters.registry import make_sut
from loadgen.api import run_test
from loadgen.campaigns.search import SearchConfig, find_peak
from loadgen.plan.settings import load_settings
from sut.errors import ConfigError
from sut.models import check_model, load_model
from sut.workers import PRECISIONS, cpu_cores, plan_workers

BATCH = 32


@dataclass(frozen=True, slots=True)
class Target:
    """Where the figures run: `cpu` or `cuda`, at a precision (fp32, fp16, bf16)."""

    device: str = "cpu"
    precision: str = "fp32"

    @property
    def options(self) -> str:
        """The SUT spec's options for this target (the device named, never `auto`)."""
        return f"device={self.device},precision={self.precision}"


def wake_round_trip_us(trips: int = 20_000) -> float:
    """Mean round trip of two threads taking turns through two semaphores, in us."""
    ping, pong = threading.Semaphore(0), threading.Semaphore(0)

    def echo() -> None:
        for _ in range(trips):
            ping.acquire()
            pong.release()

    thread = threading.Thread(target=echo)
    thread.start()
    start = time.perf_counter()
    for _ in range(trips):
        ping.release()
        pong.acquire()
    elapsed = time.perf_counter() - start
    thread.join()
    return elapsed / trips * 1e6


def cpu_layout(spec: str | None, device: str = "cpu") -> tuple[int, int]:
    """(workers, threads per worker) from `WORKERSxTHREADS`, checked as the SUT checks its
    `workers` and `threads` (ConfigError past the cores), or the SUT's own plan when None
    (on `cuda`: one worker per GPU)."""
    workers = threads = None
    if spec is not None:
        w, sep, t = spec.partition("x")
        if not (sep and w.isdigit() and t.isdigit()):
            raise ValueError("want WORKERSxTHREADS, such as 1x2")
        workers, threads = int(w), int(t)
    cuda = torch.cuda.device_count() if device == "cuda" and torch.cuda.is_available() else 0
    plan = plan_workers(device, workers=workers, threads=threads, cores=cpu_cores(),
                        cuda_count=cuda)
    return len(plan.devices), plan.threads_per_worker


def gpu_line(precision: str) -> str:
    """The GPUs, the driver, torch and CUDA, and the precision the figures run at."""
    from loadgen.record.nvml import open_gpus

    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    gpus, _, close = open_gpus()
    driver = "unknown (no NVML)"
    if gpus:
        import pynvml

        driver = str(pynvml.nvmlSystemGetDriverVersion())
    close()
    return (f"GPU: {', '.join(names)}; driver {driver}; torch {torch.__version__}, CUDA "
            f"{torch.version.cuda}; precision {precision}")


def raw_throughput(model: str, batch: int, layout: tuple[int, int], target: Target,
                   seconds: float = 3.0) -> float:
    """Samples/s of the bare model on one batch, laid out like the SUT's CPU workers: one
    Python thread per worker, each setting its own intra-op thread count (set only in the
    main thread, the count does not reach the others and they oversubscribe the cores:
    ~0.7x), inference mode. The window opens once every thread has warmed up and closes
    when the last one ends its last forward pass. On `cuda`, worker i runs on GPU
    i mod count, on inputs already there, synchronising after each batch."""
    loaded = load_model(model, {}, seed=0)
    inputs = loaded.dataset.sample_inputs(np.arange(batch) % loaded.dataset.size)
    tensors = [torch.from_numpy(np.ascontiguousarray(v)) for v in inputs.values()]
    module = loaded.module.eval()
    workers, threads_per_worker = layout
    places = ([torch.device(f"cuda:{i % torch.cuda.device_count()}") for i in range(workers)]
              if target.device == "cuda" else [torch.device("cpu")] * workers)
    dtype = PRECISIONS[target.precision]
    on = {p: (copy.deepcopy(module).to(device=p, dtype=dtype),
              [t.to(device=p, dtype=dtype) if t.is_floating_point() else t.to(p)
               for t in tensors]) for p in set(places)}
    counts = [0] * workers
    ends = [0.0] * workers
    window: list[float] = []
    warmed = threading.Barrier(workers, action=lambda: window.append(time.perf_counter()))

    def work(slot: int) -> None:
        place = places[slot]
        net, args = on[place]
        sync = torch.cuda.synchronize if place.type == "cuda" else (lambda _: None)
        torch.set_num_threads(threads_per_worker)
        with torch.inference_mode():
            for _ in range(5):
                net(*args)
            sync(place)
            warmed.wait()
            deadline = window[0] + seconds
            while time.perf_counter() < deadline:
                net(*args)
                sync(place)
                counts[slot] += batch
            ends[slot] = time.perf_counter()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (max(ends) - window[0])


class FirstColumns(nn.Module):
    """A model that computes nothing: its output is a view of its input's first 10 columns."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :10]


#: `FirstColumns` as a user model of mlp's input shape, loaded from this script
NO_COMPUTE = "import:__main__:FirstColumns,input_shape=256"


def offline_throughput(model: str, batch: int, layout: tuple[int, int], expected: float,
                       target: Target) -> float:
    """Samples/s of an Offline run of the SUT sized to last ~3 s at `expected` samples/s."""
    settings = load_settings(None, ["scenario='Offline'", "preset='dev'",
                                    f"target_qps={expected:.0f}", "min_duration_s=3",
                                    "warmup_s=0"])
    workers, threads = layout
    spec = (f"builtin:{model},max_batch_size={batch},workers={workers},threads={threads},"
            f"{target.options}")
    result = run_test(settings, make_sut(spec))
    return float(result.stats.samples_per_s)


def harness_line(batch: int, layout: tuple[int, int], target: Target) -> None:
    """Print what the harness alone costs a batch: Offline on a model that computes nothing,
    where the workers' Python runs one at a time under the GIL."""
    samples = offline_throughput(NO_COMPUTE, batch, layout, 1e6, target)
    print(f"Harness alone, batch {batch} ({NO_COMPUTE.partition(',')[0]}, no compute): "
          f"{samples:,.0f} samples/s, {batch / samples * 1e6:.1f} us per batch", flush=True)


def offline_line(model: str, batch: int, layout: tuple[int, int], rounds: int,
                 target: Target) -> None:
    """Print the SUT's Offline throughput against the raw model's, alternated `rounds` times
    (so drift on a shared machine hits both), each SUT run sized by the raw figure before it."""
    suts, raws = [], []
    for _ in range(rounds):
        raws.append(raw_throughput(model, batch, layout, target))
        suts.append(offline_throughput(model, batch, layout, raws[-1], target))
    ratios = sorted(s / r for s, r in zip(suts, raws, strict=True))
    sut, raw = statistics.median(suts), statistics.median(raws)
    extra_us = (1 / sut - 1 / raw) * batch * layout[0] * 1e6  # per batch, in each worker
    print(f"Offline, {model}, batch {batch}, {target.device} {target.precision}, "
          f"{layout[0]} workers x {layout[1]} threads: "
          f"SUT {sut:,.0f} samples/s, raw model {raw:,.0f} samples/s (medians of {rounds}), "
          f"ratio {statistics.median(ratios):.2f}x (range {ratios[0]:.2f}-{ratios[-1]:.2f}; "
          f"target >= 0.9x); the SUT adds {extra_us:.0f} us per batch per worker", flush=True)


def server_peak(spec: str, slo_ms: float, budget_s: float, out: Path) -> dict:
    settings = load_settings(None, [
        "preset='dev'", f"target_latency_ms={slo_ms}", "min_duration_s=3",
        "min_query_count=2000", "warmup_s=0.5", "max_issue_lag_ms=5"])
    cfg = SearchConfig(start_qps=250, repeats=1, min_queries=2000, tolerance=0.05)
    return find_peak(settings, spec, out, cfg, budget_s=budget_s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default="mlp,cnn,transformer",
                        help="comma-separated built-in models for the Offline comparison")
    parser.add_argument("--model", default="mlp", help="the model for the Server comparison")
    parser.add_argument("--slo-ms", type=float, default=20.0)
    parser.add_argument("--budget-s", type=float, default=150.0, help="per find-peak")
    parser.add_argument("--rounds", type=int, default=3, help="Offline SUT/raw alternations")
    parser.add_argument("--offline-batches", default=f"{BATCH},256",
                        help="comma-separated max batch sizes for the Offline comparison")
    parser.add_argument("--layout", help="Offline CPU layout WORKERSxTHREADS, e.g. 1x2 "
                        "(default: the SUT's own plan for this machine)")
    parser.add_argument("--no-server", action="store_true", help="Offline comparison only")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="where the SUT and the raw model run (cuda: one worker per GPU)")
    parser.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32")
    args = parser.parse_args()
    target = Target(args.device, args.precision)
    if target.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device")
    if target == Target("cpu", "fp16"):
        parser.error("--precision fp16 on the CPU: the SUT falls back to fp32 there")
    try:
        layout = cpu_layout(args.layout, target.device)
    except (ValueError, ConfigError) as exc:
        parser.error(f"--layout {args.layout}: {exc}")
    batches = [int(b) for b in args.offline_batches.split(",") if b.isdigit() and int(b) > 0]
    if len(batches) != len(args.offline_batches.split(",")):
        parser.error(f"--offline-batches {args.offline_batches}: want positive integers, "
                     "such as 32,256")
    models = args.models.split(",")
    for model in (*models, args.model):
        try:
            check_model(model, {})
        except ConfigError as exc:
            parser.error(str(exc))
    if target.device == "cuda":
        print(gpu_line(target.precision), flush=True)
    print(f"Thread wake-up round trip: {wake_round_trip_us():.1f} us (two threads, semaphores)",
          flush=True)
    for batch in batches:
        harness_line(batch, layout, target)
    for model in models:
        for batch in batches:
            offline_line(model, batch, layout, args.rounds, target)
    if args.no_server:
        return
    with tempfile.TemporaryDirectory() as tmp:
        batched = server_peak(f"builtin:{args.model},max_batch_size={BATCH},"
                              f"max_queue_delay_us=2000,{target.options}", args.slo_ms,
                              args.budget_s, Path(tmp) / "batched")
        single = server_peak(f"builtin:{args.model},max_batch_size=1,{target.options}",
                             args.slo_ms, args.budget_s, Path(tmp) / "single")
    b, s = batched["peak_qps"] or 0.0, single["peak_qps"] or 0.0
    print(f"Server peak at p99 <= {args.slo_ms:g} ms: dynamic batching {b:,.0f} QPS "
          f"(bracket {batched['bracket']}), max_batch_size=1 {s:,.0f} QPS "
          f"(bracket {single['bracket']}), ratio {b / s if s else float('nan'):.2f}x "
          "(target >= 3x)")


if __name__ == "__main__":
    main()
