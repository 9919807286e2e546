"""The in-process adapter's gather: GB/s into a lent block, fp32 against bf16, one thread
against threaded (`sut.gather.Gatherer`), and whether `np.take` releases the GIL.

Each case gathers `--batch` random rows of the cnn built-in's samples (3x32x32, 512 of
them, as the adapter reads them) into a block like the ones the service lends (pinned
when CUDA is available), `--repeats` times after a warm-up; it prints the median time per
gather and the bytes written per second. `--batches` sweeps batch sizes to place the
threshold above which the gather is split (the crossover where threaded overtakes one
call). The GIL line counts how far a pure-Python thread gets while this one gathers fp32
rows, against object rows (whose gather holds the GIL: the control).

    PYTHONPATH=. .venv/bin/python benchmarks/gather.py [--batch 256] [--batches 16,64,256]
        [--helpers N] [--repeats 400] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable

import numpy as np
import torch

from sut.gather import Gatherer, default_helpers
from sut.staging import to_block

ROW = (3, 32, 32)
SAMPLES = 512
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def _median_s(work: Callable[[], None], repeats: int) -> float:
    for _ in range(max(10, repeats // 10)):
        work()
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        work()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def _block(rows: int, dtype: torch.dtype) -> np.ndarray:
    pinned = torch.cuda.is_available()
    tensor = torch.empty((rows, *ROW), dtype=dtype, pin_memory=pinned)
    return tensor.view(torch.uint16).numpy() if dtype == torch.bfloat16 else tensor.numpy()


def case(batch: int, precision: str, helpers: int, repeats: int,
         rng: np.random.Generator) -> dict[str, object]:
    """One batch size at one precision: one call against threaded."""
    data = to_block(rng.standard_normal((SAMPLES, *ROW)).astype(np.float32),
                    DTYPES[precision])
    out = _block(batch, DTYPES[precision])
    picked = rng.integers(0, SAMPLES, size=batch)
    threaded = Gatherer(helpers, threshold_bytes=0)
    try:
        one = _median_s(lambda: np.take(data, picked, axis=0, out=out, mode="clip"), repeats)
        split = _median_s(lambda: threaded.take(data, picked, out), repeats)
    finally:
        threaded.close()
    return {"batch": batch, "precision": precision, "bytes": out.nbytes, "helpers": helpers,
            "one_thread_us": round(one * 1e6, 1), "threaded_us": round(split * 1e6, 1),
            "one_thread_gb_s": round(out.nbytes / one / 1e9, 2),
            "threaded_gb_s": round(out.nbytes / split / 1e9, 2)}


def gil_progress(rng: np.random.Generator, seconds: float = 0.3) -> dict[str, float]:
    """Iterations per ms a pure-Python thread makes while this thread gathers: with fp32
    rows and, as the control that holds the GIL, object rows (near 0 when it is held)."""
    rows = rng.standard_normal((SAMPLES, 64, 64)).astype(np.float32)
    picked = rng.integers(0, SAMPLES, size=4096)
    count, stop = [0], threading.Event()

    def spin() -> None:
        while not stop.is_set():
            count[0] += 1

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    rates = {}
    try:
        for name, data in (("fp32", rows), ("object", rows[:, :32, :32].astype(object))):
            out = np.empty((len(picked), *data.shape[1:]), data.dtype)
            spun, took, began = 0, 0.0, time.perf_counter()
            while time.perf_counter() - began < seconds:  # counted only inside each call
                first, start = count[0], time.perf_counter()
                np.take(data, picked, axis=0, out=out, mode="clip")
                took += time.perf_counter() - start
                spun += count[0] - first
            rates[name] = round(spun / (took * 1e3), 1)
    finally:
        stop.set()
        spinner.join(5)
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--batches", default="", help="sweep these batch sizes, e.g. 8,32,256")
    parser.add_argument("--helpers", type=int, default=None,
                        help=f"threads beside the caller's (default {default_helpers()})")
    parser.add_argument("--repeats", type=int, default=400)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    helpers = default_helpers() if args.helpers is None else args.helpers
    helpers = max(1, helpers)  # one helper at least, or there is nothing to compare
    rng = np.random.default_rng(0)
    batches = [int(b) for b in args.batches.split(",") if b] or [args.batch]
    cases = [case(b, p, helpers, args.repeats, rng) for b in batches for p in DTYPES]
    gil = gil_progress(rng)
    if args.json:
        for c in cases:
            print(json.dumps(c))
        print(json.dumps({"python_thread_iterations_per_ms_during_take": gil}))
        return
    print(f"gather into a {'pinned' if torch.cuda.is_available() else 'plain'} block, "
          f"cnn rows {ROW}, {SAMPLES} samples, {helpers} helper thread(s)")
    for c in cases:
        print(f"batch {c['batch']:>4} {c['precision']}: {c['bytes'] / 1024:7.0f} KiB  "
              f"one thread {c['one_thread_us']:7.1f} us ({c['one_thread_gb_s']:5.2f} GB/s)  "
              f"threaded {c['threaded_us']:7.1f} us ({c['threaded_gb_s']:5.2f} GB/s)")
    print(f"GIL: a Python thread ran {gil['fp32']} iterations/ms during fp32 gathers, "
          f"{gil['object']} during object gathers (which hold the GIL): np.take "
          f"{'releases' if gil['fp32'] > 2 * gil['object'] else 'may not release'} it")


if __name__ == "__main__":
    main()
