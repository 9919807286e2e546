"""LLM serving on the built-in engine: what continuous batching buys, what the engine costs.

Prints, in one run (CPU by default; `--device cuda` on a GPU; `--json`: one JSON object with
every figure on stdout, the text on stderr):
1. the highest Poisson arrival rate at which at least `--attainment` of the requests meet
   both a TTFT and a TPOT SLO, with continuous batching against static (request-level)
   batching of the same engine: same seeded prompts and output lengths, same SLO, same
   `max_num_seqs`. TTFT counts from the *scheduled* arrival (a late driver cannot hide
   queueing); TPOT = (last token - first token) / (tokens - 1). The SLO is set from this
   machine's measured decode step (printed) so the figure means the same on any box.
   Target: continuous >= 3x static. Each trial issues `--requests-per-seq` x max_num_seqs
   requests (enough to saturate the engine: above capacity the queue outgrows the TTFT
   SLO); continuous's rate doubles from capacity / 4 up to `--cap-x` x the decode-bound
   capacity, then bisects. Static's search starts at continuous's peak / 3, so its first
   trial settles the target when it fails there (continuous >= 3x static, shown), and gets
   what continuous left of `--search-s`. Each search runs at most `--max-trials` trials. A
   rate that still passes at the cap is reported as "never saturated" (a lower bound), a
   search cut short by its time or trials as the bound it reached ("static peak < X"),
   never extrapolated.
2. the engine's decode tokens/s against a bare torch decode loop of the same model at the
   same batch size (same paged attention, no scheduler, no streaming, tensors stepped in
   place, the tokens read by the host each step): target >= 0.8x the bare eager loop. On
   cuda with graphs, the bare loop replaying the engine's own graphs is printed beside, so
   the engine's host work per step stays in view.

    .venv/bin/python benchmarks/llm_serving.py [--model tiny-llm] [--device cpu|cuda]
        [--max-num-seqs 16] [--requests-per-seq 6] [--batch 16] [--decode-tokens 128]
        [--search-s S] [--max-trials 8] [--cuda-graphs true|false] [--skip-peak] [--json]

The defaults are the short mode (under 25 s on an H100 with tiny-llm). The driver is a small
open-loop Poisson submitter of its own (a thread that sleeps to each scheduled time), reading
the engine's emit stamps; it runs in this process.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from sut.llm.attention import PagedBatch
from sut.llm.config import EngineConfig
from sut.llm.engine import LLMEngine
from sut.llm.sequence import Delta, SamplingParams
from sut.llm.tokenizer import BOS

TARGET_RATIO = 3.0  # continuous's peak over static's, at the same SLO


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
                          enable_prefix_caching=False, cuda_graphs=args.cuda_graphs == "true")
    engine = LLMEngine.build(args.model, config)
    engine.start()
    return engine


@dataclass(frozen=True)
class Trial:
    """One trial at `rate` req/s: the fraction meeting both SLOs, each SLO, and the medians."""

    rate: float
    attainment: float
    ttft_met: float
    tpot_met: float
    ttft_p50_ms: float
    tpot_p50_ms: float

    def as_dict(self) -> dict[str, float]:
        return {key: round(value, 4) for key, value in dataclasses.asdict(self).items()}


def trial(engine: LLMEngine, work: Workload, rate: float, slo: Slo, seed: int) -> Trial:
    """The SLO's attainment at `rate` requests/s (open loop, Poisson arrivals)."""
    count = len(work.prompts)
    gaps = np.random.default_rng(seed).exponential(1.0 / rate, count)
    start = time.perf_counter_ns() + 20_000_000
    scheduled = (start + np.cumsum(gaps) * 1e9).astype(np.int64)
    stamps: list[list[int]] = [[] for _ in range(count)]
    left = [count]
    done = threading.Event()
    lock = threading.Lock()

    def collect(i: int) -> Callable[[Delta], None]:
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
    ttft = np.array([stamps[i][0] - scheduled[i] for i in range(count)])
    tpot = np.array([(s[-1] - s[0]) / max(1, len(s) - 1) for s in stamps])
    ttft_met, tpot_met = ttft <= slo.ttft_ns, tpot <= slo.tpot_ns
    return Trial(rate, float((ttft_met & tpot_met).mean()), float(ttft_met.mean()),
                 float(tpot_met.mean()), float(np.median(ttft)) / 1e6,
                 float(np.median(tpot)) / 1e6)


@dataclass
class Peak:
    """One search: the highest passing rate found, the lowest failing one, how it ended, and
    every trial (rate, attainment)."""

    rate: float | None
    failed_at: float | None
    outcome: str  # found, never saturated (passed at the cap), never met, out of time/trials
    trials: list[Trial]

    @property
    def shown(self) -> str:
        """What the trials show of the peak: a value with the rate it fails at, or a bound."""
        if self.rate is None:
            return "not tried" if self.failed_at is None else f"< {self.failed_at:.2f} req/s"
        if self.failed_at is None:
            return f">= {self.rate:.2f} req/s"
        return f"{self.rate:.2f} req/s (fails at {self.failed_at:.2f})"

    def as_dict(self) -> dict[str, object]:
        return {"req_per_s": self.rate, "lowest_failing_req_per_s": self.failed_at,
                "shown": self.shown, "outcome": self.outcome,
                "trials": [t.as_dict() for t in self.trials]}


class _Stop(Exception):
    """The search may run no further trial: `outcome` says why."""

    def __init__(self, outcome: str) -> None:
        super().__init__(outcome)
        self.outcome = outcome


@dataclass(frozen=True)
class Search:
    """How a peak search runs: from `start` by doubling up to `cap` (or halving down to
    start / 64), then `bisections` bisections, within `budget_s` and `max_trials` trials; a
    rate passes when its attainment is at least `attainment`."""

    start: float
    cap: float
    bisections: int
    budget_s: float
    attainment: float
    max_trials: int


def peak_rate(attain: Callable[[float], Trial], trial_s: Callable[[float], float],
              search: Search, report: Callable[[Trial], None] | None = None) -> Peak:
    """The highest rate at which `attain(rate)` (one trial) meets the attainment. A
    rate that passes at the cap ends the search "never saturated" (a lower bound: more
    requests or a higher cap would be needed); one failing at the floor "never met"; a trial
    past `max_trials` ("out of trials") or one that would overrun the budget (`trial_s(rate)`
    seconds from now; the first always runs) is not started ("out of time")."""
    trials: list[Trial] = []
    deadline = time.perf_counter() + search.budget_s
    passed: list[float] = []
    failed: list[float] = []

    def passes(rate: float) -> bool:
        if len(trials) >= search.max_trials:
            raise _Stop("out of trials")
        if trials and time.perf_counter() + trial_s(rate) > deadline:
            raise _Stop("out of time")
        got = attain(rate)
        trials.append(got)
        if report is not None:
            report(got)
        ok = got.attainment >= search.attainment
        (passed if ok else failed).append(rate)
        return ok

    def peak(outcome: str) -> Peak:
        return Peak(max(passed, default=None), min(failed, default=None), outcome, trials)

    try:
        low, high = _bracket(passes, search.start, search.cap)
    except _Stop as stop:
        return peak(stop.outcome)
    if low is None:
        return peak("never met")
    if high is None:
        return peak("never saturated")
    for _ in range(search.bisections):
        mid = (low + high) / 2
        try:
            low, high = (mid, high) if passes(mid) else (low, mid)
        except _Stop:
            break
    return peak("found")


def static_search(search: Search, continuous: Peak, budget_s: float) -> Search:
    """Static's search: its first trial at continuous's peak / TARGET_RATIO (failing there
    shows the target met; passing, that static holds a third of continuous's peak), within
    `budget_s` (what continuous left); from `search.start` when continuous passed no rate."""
    start = search.start if continuous.rate is None else continuous.rate / TARGET_RATIO
    return dataclasses.replace(search, start=start, budget_s=budget_s)


def engine_peak(engine: LLMEngine, work: Workload, slo: Slo, search: Search, label: str,
                quiet: bool) -> Peak:
    """`peak_rate` over trials of `work` on `engine` (a trial takes len(work) / rate s);
    each trial is printed, on stderr when `quiet`."""

    def report(got: Trial) -> None:
        print(f"  {label:10s} {got.rate:9.2f} req/s  attainment {got.attainment:6.1%}"
              f" (TTFT met {got.ttft_met:6.1%}, p50 {got.ttft_p50_ms:8.2f} ms;"
              f" TPOT met {got.tpot_met:6.1%}, p50 {got.tpot_p50_ms:7.3f} ms)",
              file=sys.stderr if quiet else sys.stdout, flush=True)

    return peak_rate(lambda rate: trial(engine, work, rate, slo, seed=int(rate * 1000)),
                     lambda rate: len(work.prompts) / rate, search,
                     report)


def _bracket(passes: Callable[[float], bool], start: float,
             cap: float) -> tuple[float | None, float | None]:
    """(passing, failing) neighbours by doubling up to `cap` or halving down to start / 64;
    None for the side never reached."""
    if passes(start):
        low = start
        while low < cap:
            high = min(low * 2, cap)
            if not passes(high):
                return low, high
            low = high
        return low, None
    high = start
    while high / 2 >= start / 64:
        if passes(high / 2):
            return high / 2, high
        high /= 2
    return None, high


def decode_step_ns(engine: LLMEngine, batch: int) -> float:
    """Median engine step while `batch` sequences decode (from the step trace)."""
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
    return float(statistics.median(steps))


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


def bare_decode_rate(engine: LLMEngine, batch: int, prompt: int, tokens: int,
                     graphs: bool) -> float:
    """Decode tokens/s of a bare loop: the same model, blocks laid out per sequence, the
    tokens read by the host each step; eager, or replaying the engine's captured graphs
    (inputs updated on the device, no host buffers)."""
    runner = engine.runner
    model, device, size = runner.model, runner.device, runner.block_size
    per_seq = -(-(prompt + tokens) // size)
    assert per_seq * batch <= runner.num_blocks, "raise num_kv_blocks for the bare loop"
    tables = torch.arange(batch * per_seq, device=device).view(batch, per_seq)
    rows = torch.arange(batch, device=device)
    prompts = torch.stack([torch.tensor([BOS, *((np.arange(prompt - 1) + b) % 26 + 97)
                                         .tolist()]) for b in range(batch)]).to(device)
    replayed = runner.graphs if graphs else None
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
        if replayed is not None:
            buffers = runner.decode_buffers
            buffers.fill([0] * batch, [0] * batch, [buffers.pad_slot] * batch,
                         tables.tolist(), buffers.max_seqs, buffers.max_blocks)
            buffers.upload()
        sync(device)
        began = time.perf_counter_ns()
        for _ in range(tokens - 1):
            width = int(position[0]) // size + 1
            slots = tables[rows, position // size] * size + position % size
            if replayed is None:
                paged = PagedBatch(runner.kv, slots, tables[:, :width], rows[:, None],
                                   position[:, None], rows)
                token = model(token, position, paged).argmax(-1)
            else:
                bucket = replayed.pick(batch, width)
                assert bucket is not None, "the bare loop outgrew the captured graphs"
                buffers.tokens[:batch].copy_(token)
                buffers.positions[:batch].copy_(position)
                buffers.slots[:batch].copy_(slots)
                token = replayed.replay(*bucket)[:batch].argmax(-1)
            token.tolist()  # the host reads the tokens each step, as any server must
            position += 1
        elapsed = time.perf_counter_ns() - began
    return batch * (tokens - 1) / (elapsed / 1e9)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def decode_figures(engine: LLMEngine, args: argparse.Namespace, say: Callable[[str], None]
                   ) -> dict[str, object]:
    """Part 2: the engine's decode tokens/s against the bare loops, median of alternated
    rounds. The target ratio is against the bare eager loop (as batching.py's is against the
    raw eager loop); beside it, on graphs, the ratio against the bare loop replaying the
    engine's own graphs, which leaves the engine's host work per step in plain view."""
    graphs = engine.runner.graphs is not None
    rates: dict[str, list[float]] = {"engine": [], "bare_eager": [], "bare_graphs": []}
    for _ in range(args.rounds):
        rates["engine"].append(engine_decode_rate(engine, args.batch, args.prompt_tokens,
                                                  args.decode_tokens))
        rates["bare_eager"].append(bare_decode_rate(engine, args.batch, args.prompt_tokens,
                                                    args.decode_tokens, graphs=False))
        if graphs:
            rates["bare_graphs"].append(bare_decode_rate(
                engine, args.batch, args.prompt_tokens, args.decode_tokens, graphs=True))
    ratios = [e / b for e, b in zip(rates["engine"], rates["bare_eager"], strict=True)]
    graph_ratios = [e / b for e, b in zip(rates["engine"], rates["bare_graphs"], strict=False)]
    medians = {k: statistics.median(v) if v else None for k, v in rates.items()}
    ratio = statistics.median(ratios)
    say(f"  engine {medians['engine']:9.0f} tok/s   bare eager loop {medians['bare_eager']:9.0f}"
        f" tok/s" + (f"   bare graph loop {medians['bare_graphs']:9.0f} tok/s" if graphs else ""))
    say(f"  engine / bare eager loop {ratio:.2f}x (range {min(ratios):.2f}-{max(ratios):.2f};"
        f" target >= 0.8x)" + (f"; engine / bare graph loop"
                               f" {statistics.median(graph_ratios):.2f}x" if graphs else ""))
    return {"batch": args.batch, "prompt_tokens": args.prompt_tokens,
            "decode_tokens": args.decode_tokens, "rounds": args.rounds,
            "engine_tokens_per_s": medians["engine"],
            "bare_eager_tokens_per_s": medians["bare_eager"],
            "bare_graphs_tokens_per_s": medians["bare_graphs"],
            "ratio": ratio, "ratio_min": min(ratios), "ratio_max": max(ratios),
            "ratio_vs_bare_graphs": statistics.median(graph_ratios) if graphs else None,
            "target": 0.8, "met": ratio >= 0.8}


def peak_figures(continuous: LLMEngine, args: argparse.Namespace,
                 say: Callable[[str], None]) -> dict[str, object]:
    """Part 1: continuous against static batching at the same SLO (stops `continuous`)."""
    step = decode_step_ns(continuous, args.max_num_seqs)
    slo = Slo(ttft_ns=int(args.ttft_steps * step), tpot_ns=int(args.tpot_steps * step))
    requests = args.requests or args.requests_per_seq * args.max_num_seqs
    work = Workload.draw(requests)
    capacity = args.max_num_seqs / (statistics.mean(work.outputs) * step / 1e9)
    start, cap = capacity / 4, capacity * args.cap_x
    say(f"\n1. peak rate with >= {args.attainment:.0%} of {requests} requests"
        f" ({args.requests_per_seq} per seat unless --requests) meeting the SLO; decode step at"
        f" batch {args.max_num_seqs}: {step / 1e6:.3f} ms, so TTFT <= {slo.ttft_ns / 1e6:.2f} ms"
        f" ({args.ttft_steps:g} steps), TPOT <= {slo.tpot_ns / 1e6:.3f} ms"
        f" ({args.tpot_steps:g} steps)")
    say(f"  (decode-bound capacity ~{capacity:.1f} req/s; the search starts at {start:.2f}"
        f" and stops at {cap:.1f} = {args.cap_x:g}x capacity)")
    quiet = args.json
    total = args.search_s or (16.0 if args.device == "cuda" else 600.0)
    search = Search(start, cap, args.bisections, total / 2, args.attainment, args.max_trials)
    began = time.perf_counter()
    peaks = {"continuous": engine_peak(continuous, work, slo, search, "continuous", quiet)}
    left = total - (time.perf_counter() - began)
    continuous.stop()
    static = _engine(args, "static")
    second = static_search(search, peaks["continuous"], left)
    say(f"  (static starts at {second.start:.2f} req/s"
        + (f" = continuous's peak / {TARGET_RATIO:g}" if peaks["continuous"].rate else "")
        + f", with {max(left, 0.0):.1f} s left)")
    peaks["static"] = engine_peak(static, work, slo, second, "static", quiet)
    static.stop()
    ratio = _ratio(peaks["continuous"], peaks["static"])
    for name, peak in peaks.items():
        tried = len(peak.trials)
        say(f"  {name:10s} peak {peak.shown} ({peak.outcome}; {tried} trial"
            f"{'' if tried == 1 else 's'})")
    say(f"  continuous / static: {ratio['text']}")
    return {"decode_step_ms": step / 1e6, "requests": requests, "attainment": args.attainment,
            "slo": {"ttft_ms": slo.ttft_ns / 1e6, "tpot_ms": slo.tpot_ns / 1e6,
                    "ttft_steps": args.ttft_steps, "tpot_steps": args.tpot_steps},
            "capacity_req_per_s": capacity, "search_cap_req_per_s": cap,
            "search_s": total, "max_trials": args.max_trials,
            "static_start_req_per_s": second.start,
            "continuous": peaks["continuous"].as_dict(), "static": peaks["static"].as_dict(),
            "continuous_over_static": ratio["value"],
            "continuous_over_static_at_least": ratio["at_least"],
            "continuous_over_static_at_most": ratio["at_most"], "ratio_note": ratio["text"],
            "claim": ratio["claim"], "target": TARGET_RATIO, "met": ratio["met"]}


def _ratio(continuous: Peak, static: Peak) -> dict[str, Any]:
    """continuous / static at their highest passing rates (`value`), and what the trials
    bound for sure: `at_least`, continuous's highest pass over static's lowest failure
    (static's peak lies below every rate it failed), and `at_most`, continuous's lowest
    failure over static's highest pass. `claim`: "met" (at_least >= TARGET_RATIO),
    "refuted" (at_most below it) or "open"."""
    value = at_least = at_most = None
    if continuous.rate is not None and static.rate is not None:
        value = continuous.rate / static.rate
    if continuous.rate is not None and static.failed_at is not None:
        at_least = continuous.rate / static.failed_at
    if continuous.failed_at is not None and static.rate is not None:
        at_most = continuous.failed_at / static.rate
    met = at_least is not None and at_least >= TARGET_RATIO * (1 - 1e-9)  # C / (C / 3)
    claim = "met" if met else "refuted" if at_most is not None and at_most < TARGET_RATIO \
        else "open"
    if value is None and at_least is None:
        text = "unknown (" + ("continuous passed no rate" if continuous.rate is None
                              else "static failed no rate") + ")"
    else:
        shown = [f"{value:.1f}x" if value is not None else "",
                 f"at least {at_least:.1f}x" if at_least is not None else "",
                 f"at most {at_most:.1f}x" if at_most is not None else ""]
        text = ", ".join(part for part in shown if part)
        if continuous.outcome == "never saturated":
            text += " (continuous never saturated: a lower bound)"
    text += f"; target >= {TARGET_RATIO:g}x: {claim}"
    return {"value": value, "at_least": at_least, "at_most": at_most, "text": text,
            "claim": claim, "met": met}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (`argv`, else sys.argv's)."""
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny-llm")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--requests", type=int, default=0,
                        help="requests per trial (default: --requests-per-seq x max_num_seqs)")
    parser.add_argument("--requests-per-seq", type=int, default=6,
                        help="requests per seat when --requests is not given (default 6)")
    parser.add_argument("--attainment", type=float, default=0.9)
    parser.add_argument("--ttft-steps", type=float, default=100,
                        help="TTFT SLO in decode steps at batch max_num_seqs (default 100)")
    parser.add_argument("--tpot-steps", type=float, default=3,
                        help="TPOT SLO in decode steps at batch max_num_seqs (default 3)")
    parser.add_argument("--cap-x", type=float, default=4.0,
                        help="the search's highest rate, in decode-bound capacities (default 4)")
    parser.add_argument("--bisections", type=int, default=3)
    parser.add_argument("--max-trials", type=int, default=8,
                        help="trials per peak search at the most (default 8)")
    parser.add_argument("--search-s", type=float, default=0.0,
                        help="seconds for both peak searches together, continuous's at most"
                             " half, static's the rest (default 16 on cuda, 600 on cpu)")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cuda-graphs", choices=("true", "false"), default="true")
    parser.add_argument("--skip-peak", action="store_true", help="part 2 only")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object with every figure (and nothing else)")
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    began = time.perf_counter()

    def say(line: str) -> None:  # under --json the text goes to stderr, a log of the run
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    continuous = _engine(args, "continuous")
    info = continuous.describe()
    say(f"model {args.model}, device {info['device_name']}, torch threads"
        f" {torch.get_num_threads()}, decode path {info['decode_path']}")
    say(f"\n2. decode tokens/s at batch {args.batch} ({args.prompt_tokens}-token prompts,"
        f" {args.decode_tokens} tokens each), median of {args.rounds} alternated rounds")
    figures: dict[str, object] = {
        "model": args.model, "device": info["device"], "device_name": info["device_name"],
        "torch": torch.__version__, "decode_path": info["decode_path"],
        "max_num_seqs": args.max_num_seqs,
        "decode": decode_figures(continuous, args, say)}
    if args.skip_peak:
        continuous.stop()
    else:
        figures["batching"] = peak_figures(continuous, args, say)
    figures["elapsed_s"] = round(time.perf_counter() - began, 2)
    say(f"\n(took {figures['elapsed_s']} s)")
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
