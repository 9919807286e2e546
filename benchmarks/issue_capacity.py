"""Null-SUT Server capacity of one loadgen process against MLCommons' official LoadGen.

For each tool, the highest target QPS whose Server run stays VALID (same SLO,
same minimum duration) is found by doubling then bisection, and its p50
latency and issue lag are printed with the ratio, measured in the same run.

    .venv/bin/python benchmarks/issue_capacity.py [--duration 3] [--steps 5]
"""

from __future__ import annotations

import argparse
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from loadgen.adapters.null import NullSut
from loadgen.api import run_async, run_loop
from loadgen.settings import load_settings

SLO_MS = 1.0


def loadgen_probe(qps: float, duration_s: float) -> tuple[bool, dict[str, float]]:
    settings = load_settings(None, [
        "preset='dev'", f"target_qps={qps}", f"target_latency_ms={SLO_MS}",
        f"min_duration_s={duration_s}", "min_query_count=1000", "warmup_s=0.5"])
    r = run_loop(run_async(settings, NullSut()))
    return r["valid"], {"p50_ns": r["latency_ns"]["p50"], "p99_ns": r["latency_ns"]["p99"],
                        "lag_p50_ns": r["issue_lag_ns"]["p50"],
                        "lag_p99_ns": r["issue_lag_ns"]["p99"]}


def mlperf_probe(qps: float, duration_s: float) -> tuple[bool, dict[str, float]]:
    import mlperf_loadgen as lg

    def issue(samples: list) -> None:
        lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])

    settings = lg.TestSettings()
    settings.scenario = lg.TestScenario.Server
    settings.mode = lg.TestMode.PerformanceOnly
    settings.server_target_qps = qps
    settings.server_target_latency_ns = int(SLO_MS * 1e6)
    settings.min_duration_ms = int(duration_s * 1000)
    settings.min_query_count = 1000
    with tempfile.TemporaryDirectory() as out:
        log = lg.LogSettings()
        log.log_output.outdir = out
        log.log_output.copy_summary_to_stdout = False
        sut = lg.ConstructSUT(issue, lambda: None)
        qsl = lg.ConstructQSL(1024, 1024, lambda s: None, lambda s: None)
        lg.StartTestWithLogSettings(sut, qsl, settings, log)
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
        text = (Path(out) / "mlperf_log_summary.txt").read_text()
    valid = "Result is : VALID" in text
    p50 = re.search(r"50\.00 percentile latency \(ns\)\s*:\s*(\d+)", text)
    p99 = re.search(r"99\.00 percentile latency \(ns\)\s*:\s*(\d+)", text)
    return valid, {"p50_ns": float(p50.group(1)) if p50 else float("nan"),
                   "p99_ns": float(p99.group(1)) if p99 else float("nan")}


def peak(probe: Callable[[float, float], tuple[bool, dict[str, float]]], start: float,
         duration_s: float, steps: int) -> tuple[float, dict[str, float]]:
    """Highest passing QPS: double until a failure, then bisect `steps` times."""
    lo, lo_figures, hi = 0.0, {}, start
    while True:
        ok, figures = probe(hi, duration_s)
        print(f"  {probe.__name__:<14} {hi:>10.0f} QPS  {'VALID' if ok else 'INVALID'}  "
              + "  ".join(f"{k}={v:.0f}" for k, v in figures.items()), flush=True)
        if not ok:
            break
        lo, lo_figures, hi = hi, figures, hi * 2
    for _ in range(steps):
        mid = (lo + hi) / 2
        ok, figures = probe(mid, duration_s)
        print(f"  {probe.__name__:<14} {mid:>10.0f} QPS  {'VALID' if ok else 'INVALID'}  "
              + "  ".join(f"{k}={v:.0f}" for k, v in figures.items()), flush=True)
        if ok:
            lo, lo_figures = mid, figures
        else:
            hi = mid
    return lo, lo_figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per probe")
    parser.add_argument("--steps", type=int, default=5, help="bisection steps")
    parser.add_argument("--start", type=float, default=20000.0, help="first QPS probed")
    args = parser.parse_args()
    print(f"null SUT, Server, p99 SLO {SLO_MS} ms, {args.duration} s per probe")
    ours, ours_fig = peak(loadgen_probe, args.start, args.duration, args.steps)
    theirs, theirs_fig = peak(mlperf_probe, args.start, args.duration, args.steps)
    print(f"loadgen (1 process): {ours:10.0f} QPS valid; p50 {ours_fig.get('p50_ns', 0) / 1e3:.1f} us"
          f", p99 {ours_fig.get('p99_ns', 0) / 1e3:.1f} us, issue lag p50 "
          f"{ours_fig.get('lag_p50_ns', 0) / 1e3:.1f} us, p99 {ours_fig.get('lag_p99_ns', 0) / 1e3:.1f} us")
    print(f"MLPerf LoadGen     : {theirs:10.0f} QPS valid; p50 "
          f"{theirs_fig.get('p50_ns', 0) / 1e3:.1f} us, p99 {theirs_fig.get('p99_ns', 0) / 1e3:.1f} us")
    print(f"ratio loadgen / MLPerf LoadGen: {ours / theirs:.2f}x" if theirs else "ratio: n/a")


if __name__ == "__main__":
    main()
