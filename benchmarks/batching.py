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

With `--device cuda` every figure runs on one GPU (cuda:0): the raw model is fed
inputs already on the GPU in one thread and synchronised after each batch (`eager`;
`--raw-modes eager,graph` adds the same loop replaying a CUDA graph, so the harness's
own overhead stays visible beside the target), at `--precision` fp32, fp16 or bf16;
the first line names the GPU and driver. `--variants` compares executor paths on the
same cases: `default` (the SUT's own defaults), `serial` (one batch at a time per
instance, one instance: the path before the pipeline), `pipelined-N` (a ring per
instance, eager, N instances), `graphs-N` (the ring with CUDA graphs, N instances),
`graphs-1-two-threads` (graphs-1 with an issue and a completion thread), `host-samples`
(the defaults with `start_from_device=false`: the samples gathered on the host and sent
as rows, where the default keeps them on the GPU and sends indices). On cuda the default
`--variants` is `default,host-samples`, so the host path's cost stays visible; the
variants of a case share its raw loops.
`--json` prints one JSON object per case instead of prose: model, batch, device,
precision, variant, samples (where the SUT's samples started: `device (N MiB per GPU)`
or `host`), sut_samples_per_s, raw_samples_per_s (eager), ratio, raw_graph_samples_per_s
and ratio_graph (with `--raw-modes ...,graph`), component_p50_us (h2d, compute,
d2h, queue, ...), and with `--harness` a first case: the no-compute model at the
largest batch (what the harness alone costs a batch).

    .venv/bin/python benchmarks/batching.py [--models mlp,cnn,transformer] [--rounds 3]
        [--offline-batches 32,256] [--layout 1x2] [--no-server] [--seconds 3]
        [--model mlp] [--slo-ms 20] [--budget-s 150] [--device cpu|cuda] [--precision fp32]
        [--variants default,host-samples,serial,pipelined-1,pipelined-2,graphs-1,...]
        [--raw-modes eager,graph] [--json] [--harness]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
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
#: variant -> SUT options (empty: the SUT's defaults)
VARIANTS = {
    "default": "",
    "serial": "pipelined=false,cuda_graphs=false,instances=1",
    "pipelined-1": "pipelined=true,cuda_graphs=false,instances=1",
    "pipelined-2": "pipelined=true,cuda_graphs=false,instances=2",
    "graphs-1": "pipelined=true,cuda_graphs=true,instances=1",
    "graphs-2": "pipelined=true,cuda_graphs=true,instances=2",
    "graphs-1-two-threads": "pipelined=true,cuda_graphs=true,instances=1,completion_thread=true",
    "host-samples": "start_from_device=false",
}
#: --variants when not given, by device
DEFAULT_VARIANTS = {"cpu": "default", "cuda": "default,host-samples"}


@dataclass(frozen=True, slots=True)
class Target:
    """Where the figures run: `cpu` or `cuda`, at a precision (fp32, fp16, bf16)."""

    device: str = "cpu"
    precision: str = "fp32"

    @property
    def options(self) -> str:
        """The SUT spec's options for this target (the device named, never `auto`; one GPU)."""
        device = "cuda:0" if self.device == "cuda" else self.device
        return f"device={device},precision={self.precision}"


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
                   seconds: float = 3.0, mode: str = "eager") -> float:
    """Samples/s of the bare model on one batch, laid out like the SUT's CPU workers: one
    Python thread per worker, each setting its own intra-op thread count (set only in the
    main thread, the count does not reach the others and they oversubscribe the cores:
    ~0.7x), inference mode. The window opens once every thread has warmed up and closes
    when the last one ends its last forward pass. On `cuda`, one thread on GPU 0, on
    inputs already there, synchronising after each batch; `mode` graph replays a CUDA
    graph of the forward instead of running it eagerly."""
    loaded = load_model(model, {}, seed=0)
    inputs = loaded.dataset.sample_inputs(np.arange(batch) % loaded.dataset.size)
    tensors = [torch.from_numpy(np.ascontiguousarray(v)) for v in inputs.values()]
    module = loaded.module.eval()
    workers, threads_per_worker = layout
    if target.device == "cuda":
        workers = 1
    places = ([torch.device("cuda:0")] if target.device == "cuda"
              else [torch.device("cpu")] * workers)
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
            step = _replayer(net, args, place) if mode == "graph" else (lambda: net(*args))
            warmed.wait()
            deadline = window[0] + seconds
            while time.perf_counter() < deadline:
                step()
                sync(place)
                counts[slot] += batch
            ends[slot] = time.perf_counter()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (max(ends) - window[0])


def _replayer(net: nn.Module, args: list[torch.Tensor],
              place: torch.device) -> Callable[[], None]:
    """`graph.replay` of `net(*args)` captured on `place` (a CUDA device)."""
    side = torch.cuda.Stream(place)  # type: ignore[no-untyped-call]
    side.wait_stream(torch.cuda.current_stream(place))
    with torch.cuda.stream(side):
        net(*args)
    side.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        net(*args)
    return graph.replay


class FirstColumns(nn.Module):
    """A model that computes nothing: its output is a view of its input's first 10 columns."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :10]


#: `FirstColumns` as a user model of mlp's input shape, loaded from this script
NO_COMPUTE = "import:__main__:FirstColumns,input_shape=256"


def offline_run(model: str, batch: int, layout: tuple[int, int], expected: float,
                target: Target, variant: str = "default", seconds: float = 3.0
                ) -> tuple[float, dict[str, float], dict[str, str]]:
    """Samples/s of an Offline run of the SUT sized to last ~`seconds` at `expected`
    samples/s, its components' p50s in us, and the paths it names (`executor`, and
    `samples`: where its samples started)."""
    settings = load_settings(None, ["scenario='Offline'", "preset='dev'",
                                    f"target_qps={expected:.0f}", f"min_duration_s={seconds}",
                                    "warmup_s=0"])
    workers, threads = layout
    options = [o for o in VARIANTS[variant].split(",") if o]
    if target.device == "cpu":  # the raw loop's layout; instance counts are the GPU's
        options = [o for o in options if not o.startswith("instances=")]
        options += [f"workers={workers}", f"threads={threads}"]
    spec = f"builtin:{model},max_batch_size={batch},{','.join([*options, target.options])}"
    result = run_test(settings, make_sut(spec))
    p50s = {name: round(c.latency.p50 / 1e3, 1) for name, c in result.stats.components_ns.items()}
    paths = {key: str(result.sut.get(key, "")) for key in ("executor", "samples")}
    return float(result.stats.samples_per_s), p50s, paths


def offline_throughput(model: str, batch: int, layout: tuple[int, int], expected: float,
                       target: Target) -> float:
    """Samples/s of an Offline run of the SUT sized to last ~3 s at `expected` samples/s."""
    return offline_run(model, batch, layout, expected, target)[0]


def harness_case(batch: int, layout: tuple[int, int], target: Target, variant: str = "default",
                 seconds: float = 3.0) -> dict[str, object]:
    """What the harness alone costs a batch: Offline on a model that computes nothing,
    where the workers' Python runs one at a time under the GIL."""
    samples, p50s, paths = offline_run(NO_COMPUTE, batch, layout, 1e6, target, variant,
                                       seconds)
    return {"model": "no-compute", "batch": batch, "device": target.device,
            "precision": target.precision, "variant": variant, **paths,
            "sut_samples_per_s": round(samples),
            "us_per_batch": round(batch / samples * 1e6, 1), "component_p50_us": p50s}


def offline_cases(model: str, batch: int, layout: tuple[int, int], rounds: int,
                  target: Target, variants: tuple[str, ...] = ("default",),
                  seconds: float = 3.0, raw_modes: tuple[str, ...] = ("eager",)
                  ) -> list[dict[str, object]]:
    """Each variant's Offline throughput against the raw model's, alternated `rounds` times
    (so drift on a shared machine hits both), each SUT run sized by the raw figure before
    it (the variants share the raw loops); medians, the ratio's range, and the last SUT
    run's component p50s, one case per variant."""
    suts: dict[str, list[float]] = {v: [] for v in variants}
    p50s: dict[str, dict[str, float]] = {}
    paths: dict[str, dict[str, str]] = {}
    raws, graphs = [], []
    for _ in range(rounds):
        raws.append(raw_throughput(model, batch, layout, target, seconds))
        if "graph" in raw_modes:
            graphs.append(raw_throughput(model, batch, layout, target, seconds, "graph"))
        for variant in variants:
            sut, p50s[variant], paths[variant] = offline_run(model, batch, layout, raws[-1],
                                                             target, variant, seconds)
            suts[variant].append(sut)
    return [_case(model, batch, layout, target, v, seconds, suts[v], raws, graphs, p50s[v],
                  paths[v]) for v in variants]


def _case(model: str, batch: int, layout: tuple[int, int], target: Target, variant: str,
          seconds: float, suts: list[float], raws: list[float], graphs: list[float],
          p50s: dict[str, float], paths: dict[str, str]) -> dict[str, object]:
    """One variant's case from its SUT runs and the raw loops beside them."""
    rounds = len(raws)
    ratios = sorted(s / r for s, r in zip(suts, raws, strict=True))
    sut, raw = statistics.median(suts), statistics.median(raws)
    workers = 1 if target.device == "cuda" else layout[0]
    case: dict[str, object] = {
        "model": model, "batch": batch, "device": target.device, "precision": target.precision,
        "variant": variant, **paths, "rounds": rounds, "seconds": seconds,
        "sut_samples_per_s": round(sut), "raw_samples_per_s": round(raw),
        "ratio": round(statistics.median(ratios), 3),
        "ratio_range": [round(ratios[0], 3), round(ratios[-1], 3)],
        "sut_adds_us_per_batch": (round((1 / sut - 1 / raw) * batch * workers * 1e6, 1)
                                  if sut > 0 else None),  # None: no batch answered
        "component_p50_us": p50s,
    }
    if graphs:
        case["raw_graph_samples_per_s"] = round(statistics.median(graphs))
        case["ratio_graph"] = round(sut / statistics.median(graphs), 3)
    return case


def offline_line(case: dict[str, object], layout: tuple[int, int]) -> str:
    """One case in prose."""
    graph = (f", raw with CUDA graphs {case['raw_graph_samples_per_s']:,} samples/s "
             f"(ratio {case['ratio_graph']:.2f}x)" if "ratio_graph" in case else "")
    where = ("1 GPU" if case["device"] == "cuda"
             else f"{layout[0]} workers x {layout[1]} threads")
    span = case["ratio_range"]
    assert isinstance(span, list)
    low, high = span
    return (f"Offline, {case['model']}, batch {case['batch']}, {case['device']} "
            f"{case['precision']}, {where}, {case['variant']} ({case['executor']}; samples "
            f"on the {case['samples']}): "
            f"SUT {case['sut_samples_per_s']:,} samples/s, raw model "
            f"{case['raw_samples_per_s']:,} samples/s (medians of {case['rounds']}), ratio "
            f"{case['ratio']:.2f}x (range {low:.2f}-{high:.2f}; target >= 0.9x){graph}; "
            f"the SUT adds {_us(case['sut_adds_us_per_batch'])} per batch per worker; "
            f"component p50s (us): {case['component_p50_us']}")


def _us(value: object) -> str:
    """Microseconds, or why there are none."""
    return f"{value:.0f} us" if isinstance(value, float) else "- (no batch answered)"


def server_peak(spec: str, slo_ms: float, budget_s: float, out: Path) -> dict:
    settings = load_settings(None, [
        "preset='dev'", f"target_latency_ms={slo_ms}", "min_duration_s=3",
        "min_query_count=2000", "warmup_s=0.5", "max_issue_lag_ms=5"])
    cfg = SearchConfig(start_qps=250, repeats=1, min_queries=2000, tolerance=0.05)
    return find_peak(settings, spec, out, cfg, budget_s=budget_s).as_dict()


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
                        help="where the SUT and the raw model run (cuda: GPU 0)")
    parser.add_argument("--precision", choices=tuple(PRECISIONS), default="fp32")
    parser.add_argument("--variants",
                        help=f"comma-separated executor paths: {', '.join(VARIANTS)} "
                        "(default: default on cpu, default,host-samples on cuda)")
    parser.add_argument("--raw-modes", default="eager",
                        help="raw loops: eager (the target's baseline), and graph (CUDA only)")
    parser.add_argument("--seconds", type=float, default=3.0,
                        help="length of each raw loop and each SUT run")
    parser.add_argument("--json", action="store_true", help="one JSON object per case")
    parser.add_argument("--harness", action="store_true",
                        help="with --json: add the no-compute model's cost per batch, at "
                        "the largest batch")
    args = parser.parse_args()
    variants = tuple((args.variants or DEFAULT_VARIANTS[args.device]).split(","))
    raw_modes = tuple(args.raw_modes.split(","))
    if unknown := [v for v in variants if v not in VARIANTS]:
        parser.error(f"--variants: unknown {unknown}; known: {', '.join(VARIANTS)}")
    if unknown := [m for m in raw_modes if m not in ("eager", "graph")] or (
            [] if "eager" in raw_modes else ["(eager is required)"]):
        parser.error(f"--raw-modes: {unknown}; want eager or eager,graph")
    if args.device == "cpu" and ("graph" in raw_modes or any("graphs" in v for v in variants)):
        parser.error("CUDA graphs (--raw-modes graph, --variants graphs-N) need --device cuda")
    if args.seconds <= 0:
        parser.error("--seconds must be > 0")
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
    if args.json:
        if args.harness:
            print(json.dumps(harness_case(batches[-1], layout, target, variants[0],
                                          args.seconds)), flush=True)
        for model in models:
            for batch in batches:
                for case in offline_cases(model, batch, layout, args.rounds, target, variants,
                                          args.seconds, raw_modes):
                    print(json.dumps(case), flush=True)
        return
    if target.device == "cuda":
        print(gpu_line(target.precision), flush=True)
    print(f"Thread wake-up round trip: {wake_round_trip_us():.1f} us (two threads, semaphores)",
          flush=True)
    for batch in batches:
        case = harness_case(batch, layout, target, variants[0], args.seconds)
        print(f"Harness alone, batch {batch} ({NO_COMPUTE.partition(',')[0]}, no compute, "
              f"{case['executor']}): {case['sut_samples_per_s']:,} samples/s, "
              f"{case['us_per_batch']:.1f} us per batch", flush=True)
    for model in models:
        for batch in batches:
            for case in offline_cases(model, batch, layout, args.rounds, target, variants,
                                      args.seconds, raw_modes):
                print(offline_line(case, layout), flush=True)
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
