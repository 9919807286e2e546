"""`loadgen calibrate`: measure this harness's issue ceiling for an adapter kind and store it.

    loadgen calibrate --sut null                 in-process adapters (null, sim:, builtin:)
    loadgen calibrate --sut http://host:8000/m   a remote endpoint as given (an echo server
                                                 measures the client side alone)

Later `loadgen run`s warn before starting when each load process must issue
above 70% of the stored ceiling.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register the `calibrate` subcommand."""
    p = sub.add_parser("calibrate", help="measure and store the harness's own issue ceiling",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sut", required=True, help="the SUT spec whose adapter kind to calibrate")
    p.add_argument("--out", type=Path, help="calibration file (default: the cache, "
                   "$LOADGEN_CACHE_DIR/calibration.json or ~/.cache/loadgen/calibration.json)")
    p.add_argument("--duration", type=float, default=1.0, help="seconds per probe")
    p.add_argument("--steps", type=int, default=4, help="bisection steps after doubling")
    p.add_argument("--start", type=float, default=5000.0, help="first rate probed (QPS)")
    p.set_defaults(handler=_calibrate)


def _calibrate(args: argparse.Namespace) -> int:
    from loadgen.campaigns.calibrate import adapter_kind, calibrate, save_calibration

    def report(qps: float, ok: bool, figures: dict[str, Any]) -> None:
        lag = figures.get("issue_lag_p99_ns", 0) / 1e6
        print(f"  {qps:>10.0f} QPS  {'keeps up' if ok else 'falls behind'}  "
              f"issue lag p99 {lag:.3f} ms  errors {figures.get('errors', 0)}", flush=True)

    entry = calibrate(args.sut, args.duration, args.steps, args.start, report)
    if entry["ceiling_qps"] <= 0:  # a busy host: a ceiling of 0 would only mislead later runs
        print("loadgen calibrate: no rate kept its schedule, down to "
              f"{args.start / 2 ** args.steps:.0f} QPS: is the host busy? nothing stored "
              "(rerun on a quieter host)", file=sys.stderr)
        return 1
    path = save_calibration(adapter_kind(args.sut), entry, args.out)
    print(json.dumps({adapter_kind(args.sut): entry}, indent=2))
    print(f"wrote {path}")
    return 0 if entry["ceiling_qps"] > 0 else 1
