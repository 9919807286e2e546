"""LLM serving on the built-in engine: what continuous batching buys, what the engine costs.

Prints, in one run (CPU by default; `--device cuda` on a GPU):
1. the highest Poisson arrival rate at which at least `--attainment` of the requests meet
   both a TTFT and a TPOT SLO, with continuous batching against static (request-level)
   batching of the same engine: same seeded prompts and output lengths, same SLO, same
   `max_num_seqs`. TTFT counts from the *scheduled* arrival (a late driver cannot hide
   queueing); TPOT = (last token - first token) / (tokens - 1). The SLO is set from this
   machine's measured decode step (printed) so the figure means the same on any box.
   Target: continuous >= 3x static. The rate is found by doubling, then bisection.
2. the engine's decode tokens/s against a bare torch decode loop of the same model at the
   same batch size (same paged attention, no scheduler, no streaming, tensors stepped in
   place): target >= 0.8x.

    .venv/bin/python benchmarks/llm_serving.py [--model tiny-llm] [--device cpu]
        [--max-num-seqs 16] [--requests 60] [--batch 16] [--decode-tokens 128]

The driver is a small open-loop Poisson submitter of its own (a thread that sleeps to each
scheduled time), reading the engine's emit stamps; it runs in this process.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from dataclasses import dataclass

import numpy as np
import torch

from sut.llm.attention import PagedBatch
from sut.llm.config import EngineConfig
from sut.llm.engine import LLMEngine
from sut.llm.sequence import Delta, SamplingParams
from sut.llm.tokenizer import BOS


@dataclass(frozen=True)
class Workload:
    """Seeded prompts and output lengths, the same for every trial."""

    prompts: list[list[int]]
    outputs: list[int]

    @classmethod
    def draw(cls, count: int, seed: int = 0) -> Workload:
        rng = np.random.default_rng(seed)
        lengths = rng.integers(16, 128, count)
        prompts = [[BOS, *rng.integers(97, 123, n).tolist()] for n in lengths]
        outputs = rng.integers(8, 160, count).tolist()
        return cls(prompts, outputs)


@dataclass(frozen=True)
class Slo:
    ttft_ns: int
    tpot_ns: int


def _engine(args: argparse.Namespace, scheduler: str) -> LLMEngine:
    config = EngineConfig(max_num_seqs=args.max_num_seqs, scheduler=scheduler,
                          device=args.device, max_num_batched_tokens=512,
                          enable_prefix_caching=False)
    engine = LLMEngine.build(args.model, config)
    engine.start()
    return engine


def trial(engine: LLMEngine, work: Workload, rate: float, slo: Slo, seed: int) -> float:
    """Attainment of the SLO at `rate` requests/s (open loop, Poisson arrivals)."""
    count = len(work.prompts)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, count)
    start = time.perf_counter_ns() + 20_000_000
    scheduled = (start + np.cumsum(gaps) * 1e9).astype(np.int64)
    stamps: list[list[int]] = [[] for _ in range(count)]
    left = [count]
    done = threading.Event()
    lock = threading.Lock()

    def collect(i: int):
        def on_output(delta: Delta) -> None:
            if delta.new_tokens:
                stamps[i].extend([delta.emit_ns] * delta.new_tokens)
            if delta.finished:
                with lock:
                    left[0] -= 1
                    if not left[0]:
                        done.set()
        return on_output

    for i in range(count):
        wait = (scheduled[i] - time.perf_counter_ns()) / 1e9
        if wait > 0:
            time.sleep(wait)
        engine.submit(work.prompts[i], SamplingParams(max_tokens=work.outputs[i],
                                                      ignore_eos=True, temperature=0.0),
                      collect(i))
    done.wait(600)
    good = 0
    for i in range(count):
        ttft = stamps[i][0] - scheduled[i]
        tpot = (stamps[i][-1] - stamps[i][0]) / max(1, len(stamps[i]) - 1)
        good += ttft <= slo.ttft_ns and tpot <= slo.tpot_ns
    return good / count


def peak_rate(engine: LLMEngine, work: Workload, slo: Slo, attainment: float,
              start: float, label: str) -> float:
    """The highest rate meeting the attainment: doubling (or halving) from `start` to a
    bracket, then 4 bisections."""

    def passes(rate: float) -> bool:
        got = trial(engine, work, rate, slo, seed=int(rate * 1000))
        print(f"  {label:10s} {rate:7.2f} req/s  attainment {got:6.1%}", flush=True)
        return got >= attainment

    low, high = start, start
    if passes(start):
        while passes(high * 2):
            high *= 2
        low, high = high, high * 2
    else:
        while not passes(low / 2) and low > 0.05:
            low /= 2
        low, high = low / 2, low
    for _ in range(4):
        mid = (low + high) / 2
        low, high = (mid, high) if passes(mid) else (low, mid)
    return low


def decode_step_ns(engine: LLMEngine, batch: int) -> float:
    """Mean engine step while `batch` sequences decode (from the step trace)."""
    done = threading.Event()
    left = [batch]

    def on_output(delta: Delta) -> None:
        if delta.finished:
            left[0] -= 1
            if not left[0]:
                done.set()

    engine.trace.clear()
    for _ in range(batch):
        engine.submit([BOS, *range(97, 97 + 48)], SamplingParams(max_tokens=64,
                                                                 ignore_eos=True), on_output)
    done.wait(600)
    steps = [r["duration_ns"] for r in engine.trace if r["decode_seqs"] == batch]
    return statistics.median(steps)


# -- part 2: the engine against a bare decode loop -------------------------------------------


def engine_decode_rate(engine: LLMEngine, batch: int, prompt: int, tokens: int) -> float:
    """Decode tokens/s of the engine with `batch` sequences decoding together."""
    stamps: list[int] = []
    firsts: list[int] = []
    done = threading.Event()
    left = [batch]

    def on_output(delta: Delta) -> None:
        if delta.new_tokens:
            (firsts if delta.output_tokens == 1 else stamps).append(delta.emit_ns)
        if delta.finished:
            left[0] -= 1
            if not left[0]:
                done.set()

    for b in range(batch):
        engine.submit([BOS, *((np.arange(prompt - 1) + b) % 26 + 97).tolist()],
                      SamplingParams(max_tokens=tokens, ignore_eos=True), on_output)
    done.wait(600)
    begin = max(firsts)
    counted = [s for s in stamps if s > begin]
    return len(counted) / ((max(counted) - begin) / 1e9)


def bare_decode_rate(engine: LLMEngine, batch: int, prompt: int, tokens: int) -> float:
    """Decode tokens/s of a bare loop: the same model, blocks laid out per sequence."""
    runner = engine.runner
    model, device, size = runner.model, runner.device, runner.block_size
    per_seq = -(-(prompt + tokens) // size)
    assert per_seq * batch <= len(runner.kv[0][0]), "raise num_kv_blocks for the bare loop"
    tables = torch.arange(batch * per_seq, device=device).view(batch, per_seq)
    rows = torch.arange(batch, device=device)
    prompts = torch.stack([torch.tensor([BOS, *((np.arange(prompt - 1) + b) % 26 + 97)
                                         .tolist()]) for b in range(batch)]).to(device)
    with torch.inference_mode():
        span = torch.arange(prompt, device=device)
        flat = prompts.reshape(-1)
        positions = span.repeat(batch)
        slots = (tables[:, 0:1] * size + span[None]).reshape(-1)
        paged = PagedBatch(runner.kv, slots, tables, torch.arange(batch * prompt, device=device)
                           .view(batch, prompt), span.expand(batch, prompt),
                           torch.arange(batch * prompt, device=device))
        logits = model(flat, positions, paged).view(batch, prompt, -1)[:, -1]
        token = logits.argmax(-1)
        position = torch.full((batch,), prompt, device=device)
        sync(device)
        began = time.perf_counter_ns()
        for _ in range(tokens - 1):
            width = int(position[0]) // size + 1
            table = tables[:, :width]
            slots = tables[rows, position // size] * size + position % size
            paged = PagedBatch(runner.kv, slots, table, rows[:, None], position[:, None], rows)
            token = model(token, position, paged).argmax(-1)
            token.tolist()  # the host reads the tokens each step, as any server must
            position += 1
        elapsed = time.perf_counter_ns() - began
    return batch * (tokens - 1) / (elapsed / 1e9)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-llm")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--requests", type=int, default=60)
    parser.add_argument("--attainment", type=float, default=0.9)
    parser.add_argument("--ttft-steps", type=float, default=100,
                        help="TTFT SLO in decode steps at batch max_num_seqs (default 100)")
    parser.add_argument("--tpot-steps", type=float, default=3,
                        help="TPOT SLO in decode steps at batch max_num_seqs (default 3)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"model {args.model}, device {args.device}, torch threads {torch.get_num_threads()}",
          flush=True)

    continuous = _engine(args, "continuous")
    print(f"\n2. decode tokens/s at batch {args.batch} ({args.prompt_tokens}-token prompts,"
          f" {args.decode_tokens} tokens each), median of {args.rounds} alternated rounds")
    ratios, engine_rates, bare_rates = [], [], []
    for _ in range(args.rounds):
        served = engine_decode_rate(continuous, args.batch, args.prompt_tokens,
                                    args.decode_tokens)
        bare = bare_decode_rate(continuous, args.batch, args.prompt_tokens, args.decode_tokens)
        engine_rates.append(served)
        bare_rates.append(bare)
        ratios.append(served / bare)
    print(f"  engine {statistics.median(engine_rates):9.0f} tok/s   bare loop"
          f" {statistics.median(bare_rates):9.0f} tok/s   ratio {statistics.median(ratios):.2f}x"
          f" (range {min(ratios):.2f}-{max(ratios):.2f}; target >= 0.8x)", flush=True)

    step = decode_step_ns(continuous, args.max_num_seqs)
    slo = Slo(ttft_ns=int(args.ttft_steps * step), tpot_ns=int(args.tpot_steps * step))
    print(f"\n1. peak rate with >= {args.attainment:.0%} of {args.requests} requests meeting"
          f" the SLO; decode step at batch {args.max_num_seqs}: {step / 1e6:.2f} ms, so"
          f" TTFT <= {slo.ttft_ns / 1e6:.1f} ms ({args.ttft_steps:g} steps),"
          f" TPOT <= {slo.tpot_ns / 1e6:.2f} ms ({args.tpot_steps:g} steps)", flush=True)
    work = Workload.draw(args.requests)
    capacity = args.max_num_seqs / (statistics.mean(work.outputs) * step / 1e9)
    start = capacity / 8
    print(f"  (decode-bound capacity ~{capacity:.1f} req/s; the search starts at {start:.2f})")
    peaks = {"continuous": peak_rate(continuous, work, slo, args.attainment, start,
                                     "continuous")}
    continuous.stop()
    static = _engine(args, "static")
    peaks["static"] = peak_rate(static, work, slo, args.attainment, start, "static")
    static.stop()
    ratio = peaks["continuous"] / peaks["static"] if peaks["static"] else float("inf")
    print(f"  continuous {peaks['continuous']:.2f} req/s   static {peaks['static']:.2f} req/s"
          f"   ratio {ratio:.1f}x (target >= 3x)")


if __name__ == "__main__":
    main()
