"""Bursts hurt the tail: p99 under bursty arrivals against Poisson at the same mean rate.

On the `sim` SUT (one server, constant service time), the same mean offered
load is sent three ways: Poisson; periodic bursts at `--factor` times the base
rate (the base chosen so that the mean matches); and gamma inter-arrivals of
shape `--shape` (CV = 1/sqrt(shape)). Each run's p50/p99 latency (from the
scheduled time) and issue lag are printed, with the p99 ratios to Poisson.

    .venv/bin/python benchmarks/bursty.py [--mean-qps 500] [--service 1ms] [--duration 20]
"""

from __future__ import annotations

import argparse

from loadgen.adapters.registry import make_sut
from loadgen.api import run_async, run_loop
from loadgen.plan.settings import load_settings
from loadgen.report.result import RunResult


def run(spec: str, duration_s: float, overrides: list[str]) -> RunResult:
    settings = load_settings(None, [
        "preset='dev'", "target_latency_ms=100", f"min_duration_s={duration_s}",
        "min_query_count=100", "warmup_s=1", *overrides])
    return run_loop(run_async(settings, make_sut(spec)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mean-qps", type=float, default=500.0, help="mean offered rate")
    parser.add_argument("--service", default="const:1ms", help="sim service time")
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds per run")
    parser.add_argument("--factor", type=float, default=3.0, help="burst rate / base rate")
    parser.add_argument("--burst", type=float, default=0.5, help="burst length, s")
    parser.add_argument("--period", type=float, default=2.5, help="one burst every, s")
    parser.add_argument("--shape", type=float, default=0.2, help="gamma shape (burstiness)")
    args = parser.parse_args()
    spec = f"sim:service={args.service},servers=1"
    duty = args.burst / args.period
    base = args.mean_qps / (1 + (args.factor - 1) * duty)
    runs = {
        "poisson": ["arrival='poisson'", f"target_qps={args.mean_qps}"],
        "burst": ["arrival='burst'", f"target_qps={base}", f"burst_qps_factor={args.factor}",
                  f"burst_duration_s={args.burst}", f"burst_period_s={args.period}"],
        "gamma": ["arrival='gamma'", f"target_qps={args.mean_qps}", f"burstiness={args.shape}"],
    }
    print(f"{spec}, mean {args.mean_qps:g} QPS for {args.duration:g} s each; bursts: "
          f"{base:.0f} QPS base, x{args.factor:g} for {args.burst:g} s every {args.period:g} s; "
          f"gamma shape {args.shape:g}")
    p99 = {}
    for name, overrides in runs.items():
        r = run(spec, args.duration, overrides)
        lat, lag, qps = r.stats.latency_ns, r.stats.issue_lag_ns, r.stats.qps_scheduled
        p99[name] = lat.p99
        print(f"  {name:<8} scheduled {qps:7.1f} QPS  p50 {lat.p50 / 1e6:7.3f} ms"
              f"  p99 {lat.p99 / 1e6:8.3f} ms  (issue lag p99 {lag.p99 / 1e6:.3f} ms)",
              flush=True)
    for name in ("burst", "gamma"):
        print(f"p99 {name} / p99 poisson at the same mean rate: {p99[name] / p99['poisson']:.1f}x")


if __name__ == "__main__":
    main()
