"""The mlperf_loadgen drop-in against MLCommons' LoadGen on the same harness: overhead.

A harness that answers every query inside its issue callback (no SUT time) runs
SingleStream (closed loop, one query in flight) and Offline (one query of all
samples) on each, each in its own interpreter through a one-line
`mlperf_loadgen.py`; printed: queries (or samples) per second and the p50 / p99
latency each reports, read from its mlperf_log_detail.txt. The difference is
the per-query cost of each harness-to-engine path (Python callbacks both).

    .venv/bin/python benchmarks/mlperf_dropin.py [--queries 20000]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

HARNESS = """
import sys
import mlperf_loadgen as lg

def issue(samples):
    lg.QuerySamplesComplete([lg.QuerySampleResponse(s.id, 0, 0) for s in samples])

s = lg.TestSettings()
s.scenario = getattr(lg.TestScenario, sys.argv[1])
s.mode = lg.TestMode.PerformanceOnly
s.min_query_count = int(sys.argv[2])
s.min_duration_ms = 0 if sys.argv[1] != "Offline" else 1
s.offline_expected_qps = 1
log = lg.LogSettings()
log.enable_trace = False
sut = lg.ConstructSUT(issue, lambda: None)
qsl = lg.ConstructQSL(1024, 1024, lambda x: None, lambda x: None)
lg.StartTestWithLogSettings(sut, qsl, s, log)
"""


def _detail(path: Path) -> dict[str, Any]:
    out = {}
    for line in path.read_text().splitlines():
        entry = json.loads(line[len(":::MLLOG "):])
        out[entry["key"]] = entry["value"]
    return out


def _run(which: str, scenario: str, queries: int, tmp: Path) -> dict[str, Any]:
    work = tmp / f"{which}-{scenario}"
    work.mkdir()
    (work / "harness.py").write_text(HARNESS)
    path = [str(ROOT)]
    if which == "loadgen":
        (work / "mlperf_loadgen.py").write_text("from loadgen.mlperf import *\n")
        path.insert(0, str(work))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    subprocess.run([sys.executable, "-P", "harness.py", scenario, str(queries)], cwd=work,
                   env=env, check=True, timeout=600)
    return _detail(work / "mlperf_log_detail.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=20000)
    args = parser.parse_args()
    spec = importlib.util.find_spec("mlperf_loadgen")
    sides = ["loadgen"] + (["mlcommons"] if spec and (spec.origin or "").endswith(".so") else [])
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in ("SingleStream", "Offline"):
            for which in sides:
                d = _run(which, scenario, args.queries, Path(tmp))
                rate = (d["result_samples_per_second"] if scenario == "Offline"
                        else d["result_qps_with_loadgen_overhead"])
                unit = "samples/s" if scenario == "Offline" else "queries/s"
                p50, p99 = (d[f"result_{p}_percentile_latency_ns"] / 1e3 for p in ("50.00", "99.00"))
                print(f"{scenario:12} {which:9} {rate:12.0f} {unit:9}  p50 {p50:9.1f} us  "
                      f"p99 {p99:9.1f} us  {d['result_validity']}")


if __name__ == "__main__":
    main()
