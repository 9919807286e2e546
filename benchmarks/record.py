"""How fast latencies get into an HDR histogram: per value, through Recorder, in bulk.

Prints ns/value for the package's per-value `record_value`, for `Recorder.add`
called once per value plus the flushes (1M values), and for one `record_array`
call over the same 1M values, with the speed-ups, all measured in this run.

    python benchmarks/record.py
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from loadgen.record.histograms import HIGHEST_NS, Recorder, new_histogram, record_array

N_VALUES = 1_000_000
N_PER_VALUE = 100_000  # record_value is ~1 us a value: a sample is enough
REPEATS = 3


def best_ns_per_value(run: Callable[[], None], n: int) -> float:
    """Fastest of REPEATS runs, in ns per value."""
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter_ns()
        run()
        best = min(best, (time.perf_counter_ns() - start) / n)
    return best


def main() -> None:
    rng = np.random.default_rng(0)
    values = np.clip(np.exp(rng.normal(np.log(2e6), 1.5, N_VALUES)), 0, HIGHEST_NS)
    array = values.astype(np.int64)
    as_ints = array.tolist()
    sample = as_ints[:N_PER_VALUE]

    def per_value() -> None:
        hist = new_histogram()
        record = hist.record_value
        for value in sample:
            record(value)

    def recorder() -> None:
        rec = Recorder()
        add = rec.add
        for value in as_ints:
            add(value)
        rec.flush()

    def bulk() -> None:
        record_array(new_histogram(), array)

    slow = best_ns_per_value(per_value, N_PER_VALUE)
    hot = best_ns_per_value(recorder, N_VALUES)
    fast = best_ns_per_value(bulk, N_VALUES)
    print(f"record_value (per value)  {slow:8.1f} ns/value   ({N_PER_VALUE:,} values)")
    print(
        f"Recorder.add + flush      {hot:8.1f} ns/value   ({N_VALUES:,} values)  "
        f"{slow / hot:5.1f}x faster"
    )
    print(
        f"record_array (bulk)       {fast:8.1f} ns/value   ({N_VALUES:,} values)  "
        f"{slow / fast:5.1f}x faster"
    )


if __name__ == "__main__":
    main()
