"""Null-SUT Server capacity: loadgen with one and two load processes, and MLCommons' LoadGen.

For each, the highest target QPS whose Server run stays VALID (same SLO, same
minimum duration) is found by doubling then bisection (`calibrate.find_ceiling`),
and its p50 latency and issue lag are printed with the ratios, measured in the
same run. Two load processes split one schedule (`--workers 2`, each its own share);
on a 2-core machine the target is at least 1.8x one process. Because a VALID
ceiling needs a clean p99 issue lag, which any other busy process on the host
spoils, the raw issue rate is printed too, as the scaling table of `scaling.py`
(1, 2, 4, ... N load processes up to the usable cores less two, `--max-processes`):
a schedule far faster than the harness, issued back to back, queries per second of
wall time, the efficiency against one process, and what the harness itself cost.
`--repeat 3` judges each rate by the majority of three probes (a shared host's stalls
fail single probes at random). `--json` prints one JSON document instead of text.

    .venv/bin/python benchmarks/issue_capacity.py [--duration 3] [--steps 5] [--no-mlperf]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scaling import print_table, process_counts, scaling_table

from loadgen.adapters.null import NullSut
from loadgen.api import run_async, run_loop, run_test
from loadgen.campaigns.calibrate import find_ceiling
from loadgen.plan.settings import load_settings
from loadgen.report.result import RunResult

SLO_MS = 1.0


def _figures(r: RunResult) -> tuple[bool, dict[str, float]]:
    s = r.stats
    return r.valid, {"p50_ns": s.latency_ns.p50, "p99_ns": s.latency_ns.p99,
                     "lag_p50_ns": s.issue_lag_ns.p50, "lag_p99_ns": s.issue_lag_ns.p99}


def loadgen_probe(qps: float, duration_s: float, workers: int = 1
                  ) -> tuple[bool, dict[str, float]]:
    settings = load_settings(None, [
        "preset='dev'", f"target_qps={qps}", f"target_latency_ms={SLO_MS}",
        f"min_duration_s={duration_s}", "min_query_count=1000", "warmup_s=0.5",
        f"workers={workers}"])
    if workers > 1:
        return _figures(run_test(settings, "null"))
    return _figures(run_loop(run_async(settings, NullSut())))


def loadgen2_probe(qps: float, duration_s: float) -> tuple[bool, dict[str, float]]:
    return loadgen_probe(qps, duration_s, workers=2)


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
         duration_s: float, steps: int, repeat: int = 1) -> tuple[float, dict[str, Any]]:
    """Highest passing QPS: double until a failure, then bisect `steps` times; a rate
    passes when most of `repeat` probes pass."""
    def report(qps: float, ok: bool, figures: dict[str, Any]) -> None:
        print(f"  {probe.__name__:<14} {qps:>10.0f} QPS  {'VALID' if ok else 'INVALID'}  "
              + "  ".join(f"{k}={v:.0f}" for k, v in figures.items()), flush=True)

    def majority(qps: float) -> tuple[bool, dict[str, float]]:
        passed: list[dict[str, float]] = []
        failed: list[dict[str, float]] = []
        while len(passed) <= repeat // 2 and len(failed) <= repeat // 2:
            ok, figures = probe(qps, duration_s)
            (passed if ok else failed).append(figures)
        return bool(len(passed) > repeat // 2), (passed or failed)[-1]

    return find_ceiling(majority, start, steps, report)


def _line(name: str, qps: float, fig: dict[str, Any]) -> str:
    lag = (f", issue lag p50 {fig.get('lag_p50_ns', 0) / 1e3:.1f} us, p99 "
           f"{fig.get('lag_p99_ns', 0) / 1e3:.1f} us" if "lag_p50_ns" in fig else "")
    return (f"{name:<21}: {qps:10.0f} QPS valid; p50 {fig.get('p50_ns', 0) / 1e3:.1f} us, "
            f"p99 {fig.get('p99_ns', 0) / 1e3:.1f} us{lag}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per probe")
    parser.add_argument("--steps", type=int, default=5, help="bisection steps")
    parser.add_argument("--start", type=float, default=20000.0, help="first QPS probed")
    parser.add_argument("--no-mlperf", action="store_true", help="skip MLCommons' LoadGen")
    parser.add_argument("--repeat", type=int, default=1, help="probes per rate (majority)")
    parser.add_argument("--saturate", type=int, default=300_000,
                        help="queries per process in the raw issue-rate runs")
    parser.add_argument("--max-processes", type=int, default=None,
                        help="the scaling table's largest row (default: usable cores - 2)")
    parser.add_argument("--json", action="store_true", help="one JSON document, no text")
    args = parser.parse_args()
    doc: dict[str, Any] = {}
    with contextlib.redirect_stdout(io.StringIO()) if args.json else contextlib.nullcontext():
        doc["scaling"] = table = scaling_table(process_counts(args.max_processes), args.saturate)
        print_table(table)
        print(f"null SUT, Server, p99 SLO {SLO_MS} ms, {args.duration} s per probe")
        one, one_fig = peak(loadgen_probe, args.start, args.duration, args.steps, args.repeat)
        two, two_fig = peak(loadgen2_probe, args.start, args.duration, args.steps, args.repeat)
        doc["valid_qps"] = {"loadgen_1": {"qps": one, **one_fig},
                            "loadgen_2": {"qps": two, **two_fig}}
        print(_line("loadgen (1 process)", one, one_fig))
        print(_line("loadgen (2 processes)", two, two_fig))
        print(f"ratio 2 processes / 1: {two / one:.2f}x" if one else "ratio 2 / 1: n/a")
        if not args.no_mlperf:
            theirs, theirs_fig = peak(mlperf_probe, args.start, args.duration, args.steps,
                                      args.repeat)
            doc["valid_qps"]["mlperf_loadgen"] = {"qps": theirs, **theirs_fig}
            print(_line("MLPerf LoadGen", theirs, theirs_fig))
            print(f"ratio loadgen (1 process) / MLPerf LoadGen: {one / theirs:.2f}x" if theirs
                  else "ratio: n/a")
    if args.json:
        print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
