"""Soak: 10 million null-SUT queries in one run; prints resident memory growth.

Target: growth <= 100 MB however long the run (histograms, buffers and the
per-query log are bounded; the log streams to disk).

    .venv/bin/python benchmarks/soak.py [--queries 10000000] [--qps 150000]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import threading
import time
from pathlib import Path

from loadgen.adapters.null import NullSut
from loadgen.api import run_test
from loadgen.plan.settings import load_settings


def rss_mb() -> float:
    """Current resident set size in MB (Linux /proc)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queries", type=int, default=10_000_000)
    parser.add_argument("--qps", type=float, default=150_000.0)
    args = parser.parse_args()
    settings = load_settings(None, [
        "preset='dev'", f"target_qps={args.qps}", "target_latency_ms=100", "min_duration_s=0",
        f"min_query_count={args.queries}", f"max_query_count={args.queries}",
        "max_issue_lag_ms=1000"])
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(1.0):
            samples.append(rss_mb())

    before = rss_mb()
    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = run_test(settings, NullSut(), Path(out))
        log_mb = (Path(out) / "queries.bin").stat().st_size / 1e6
    done.set()
    elapsed = time.perf_counter() - started
    peak = max(samples, default=rss_mb())
    queries = result.stats.queries
    print(f"{queries:,} queries in {elapsed:.1f} s "
          f"({queries / elapsed:,.0f}/s incl. setup), valid={result.valid}")
    print(f"RSS before {before:.1f} MB, peak during run {peak:.1f} MB, after {rss_mb():.1f} MB")
    print(f"RSS growth (peak - before): {peak - before:.1f} MB (target <= 100 MB); "
          f"per-query log on disk {log_mb:.0f} MB")


if __name__ == "__main__":
    main()
