"""The help texts of `loadgen` and its subcommands, written for the person running them.

The SUT spec kinds come from `loadgen.adapters.registry.SPEC_FORMS` (the one list that
errors quote too), so a new kind shows in every --help without editing this file.
"""

from __future__ import annotations

from loadgen.adapters.registry import SPEC_FORMS

__all__ = ["COMPARE", "FIND_PEAK", "GUIDE", "REPORT", "RUN", "SUT_HELP", "SWEEP"]

GUIDE = "docs/guide.md"

SUT_HELP = f"the system under test, one of: {SPEC_FORMS} (see {GUIDE})"

RUN = f"""\
Run one test: issue the scenario's queries on their precomputed schedule, time each
from when it was due, and judge the run VALID or INVALID with its reasons.

Before the first query a line states the plan and how long it takes; on a terminal a
live display follows (percent, ETA, rate, p50/p99 against the SLO, issue lag, errors),
in a pipe a plain line every 2 s. DIR receives result.json, summary.txt, report.html
(interactive, works offline) and the per-query log.

  loadgen run scenarios/server.toml --sut sim:service=exp:2ms --set preset=dev
  loadgen run scenarios/server.toml --sut http://127.0.0.1:8000/mlp --out runs/mlp

Exit 0 VALID, 1 INVALID, 2 bad usage or settings, 3 the SUT failed. Guide: {GUIDE}
"""

FIND_PEAK = f"""\
Find the highest Server rate (QPS) whose runs are VALID, latency SLO included: grow the
rate until a probe fails, narrow the bracket to --tolerance, then repeat each end
(--repeats; a rate with any failing trial fails). DIR receives peak.json, probes.csv,
one run directory per probe and report.html (latency and goodput against load, the
knee). Rerunning with the same DIR resumes.

  loadgen find-peak scenarios/server.toml --sut sim:service=exp:2ms --out runs/peak \\
      --set preset=dev --budget-s 120

Exit 0 when some rate passed, 1 when none did. Guide: {GUIDE}
"""

SWEEP = f"""\
Run a grid of settings or SUT options, N independent launches per point, and report
each point's median and spread (a point whose launches disagree is flagged NOISY, with
the metric named). DIR receives sweep.json, sweep.csv and report.html; resumable.

  loadgen sweep scenarios/server.toml --sut sim:service=exp:2ms --out runs/sweep \\
      --grid target_qps=100:400:100 --launches 3 --set preset=dev

Guide: {GUIDE}
"""

REPORT = """\
Rebuild DIR/report.html from the saved files of a run (result.json), a sweep
(sweep.json), a find-peak search (peak.json) or a comparison (compare.json, from
`loadgen compare --out`). The page is self-contained and works offline: hover for
values, drag to zoom, click a legend entry to hide a series.
"""

COMPARE = """\
Compare two measurements per metric with 95% confidence intervals of B - A, and check
that they were run the same way (a construct mismatch when they differ in more than the
variable named with --vary). A and B are run directories, result.json files or sweep
point directories (their launches count as repeats).

  loadgen compare runs/a runs/b --vary sut --out runs/a-vs-b

Exit 0, or 4 on a construct mismatch.
"""
