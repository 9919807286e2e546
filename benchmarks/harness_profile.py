"""Where the serving harness spends a batch: the no-compute model in Offline, profiled.

`benchmarks/batching.py --harness` says what the harness costs a batch; this says where.
It runs the no-compute model (`batching.NO_COMPUTE`: the output is a view of the input)
in Offline twice at `--batch`: once plain, for the wall time per batch, and once with
cProfile on every instance thread (`sut-worker-*`, `sut-instance-*`), where in Offline
all the per-batch work runs: the batcher, the executor, the hand-back, and the in-process
adapter's next chunk. It prints one JSON object:

    device, precision, variant, executor, batch, batches (profiled run), us_per_batch
    (plain run), calls_per_batch (Python-level calls, C functions included: the same
    count on any machine for the same code path), profiled_us_per_batch, and `top`: the
    functions with the most own time per batch (function, calls_per_batch,
    own_us_per_batch, cumulative_us_per_batch)

cProfile adds a fixed cost to every call, so compare the functions of one run with each
other, and `calls_per_batch` across trees; the plain run's `us_per_batch` is the figure.

    .venv/bin/python benchmarks/harness_profile.py [--device cpu|cuda] [--precision fp32]
        [--batch 256] [--variant default] [--seconds 1] [--top 25]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import threading
from collections.abc import Callable
from typing import Any

from batching import VARIANTS, FirstColumns, Target, harness_case

__all__ = ["FirstColumns", "main", "profiled_case"]  # FirstColumns: NO_COMPUTE loads it here

_INSTANCE_THREADS = ("sut-worker-", "sut-instance-")


def _profiling_instances(profiles: list[cProfile.Profile]) -> Callable[[], None]:
    """Profile every instance thread started from now on; returns the undo."""
    original = threading.Thread.run

    def run(thread: threading.Thread) -> None:
        if not thread.name.startswith(_INSTANCE_THREADS):
            original(thread)
            return
        profile = cProfile.Profile()
        profiles.append(profile)
        profile.enable()
        try:
            original(thread)
        finally:
            profile.disable()

    threading.Thread.run = run  # type: ignore[method-assign]
    return lambda: setattr(threading.Thread, "run", original)


def _batches(stats: pstats.Stats) -> int:
    """Batches handed back in a profile: calls of the service's `_deliver`."""
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    return sum(entry[1] for (path, _, name), entry in table.items()
               if name == "_deliver" and path.endswith("service.py"))


def profiled_case(batch: int, target: Target, variant: str, seconds: float,
                  top: int) -> dict[str, object]:
    """The plain run's figures and the profiled run's per-batch breakdown."""
    plain = harness_case(batch, (1, 1), target, variant, seconds)
    profiles: list[cProfile.Profile] = []
    undo = _profiling_instances(profiles)
    try:
        harness_case(batch, (1, 1), target, variant, seconds)
    finally:
        undo()
    stats = pstats.Stats(*profiles) if profiles else None
    batches = _batches(stats) if stats is not None else 0
    if stats is None or batches == 0:
        return {**plain, "batches": 0, "top": [], "note": "no batch was profiled"}
    table: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    rows = sorted(table.items(), key=lambda item: item[1][2], reverse=True)[:top]
    per = 1e6 / batches  # seconds per run -> us per batch
    return {
        "device": target.device, "precision": target.precision, "variant": variant,
        "executor": plain.get("executor"), "batch": batch, "batches": batches,
        "us_per_batch": plain["us_per_batch"],
        "calls_per_batch": round(stats.total_calls / batches, 1),  # type: ignore[attr-defined]
        "profiled_us_per_batch": round(stats.total_tt * per, 1),  # type: ignore[attr-defined]
        "top": [{"function": pstats.func_std_string(func),
                 "calls_per_batch": round(entry[1] / batches, 2),
                 "own_us_per_batch": round(entry[2] * per, 2),
                 "cumulative_us_per_batch": round(entry[3] * per, 2)}
                for func, entry in rows],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--precision", choices=("fp32", "bf16", "fp16"), default="fp32")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--variant", choices=tuple(VARIANTS), default="default")
    parser.add_argument("--seconds", type=float, default=1.0, help="each run's length")
    parser.add_argument("--top", type=int, default=25, help="functions listed")
    args = parser.parse_args()
    case = profiled_case(args.batch, Target(args.device, args.precision), args.variant,
                         args.seconds, args.top)
    print(json.dumps(case))


if __name__ == "__main__":
    main()
