"""The analysis subcommands of `loadgen`: find-peak, sweep, report, compare.

    loadgen find-peak FILE --sut SPEC --out DIR [--set k=v ...] [--budget-s S]
                      [--start-qps Q] [--min-qps Q] [--max-qps Q] [--tolerance F]
                      [--repeats N] [--min-queries N]
    loadgen sweep FILE --sut SPEC --out DIR --grid KEY=v1,v2|a:b:step [--grid sut.KEY=...]
                  --launches N [--set k=v ...]
    loadgen report DIR [--png FILE]
    loadgen compare A B [--vary KEY ...] [--json]

Exit codes: find-peak 0 when some rate passed, 1 when none did; sweep and report 0;
compare 0, or 4 (`EXIT_MISMATCH`) when A and B differ in more than the variable
compared; 2 bad usage or settings and 3 a failed run, as for `loadgen run`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadgen.cli.exits import EXIT_MISMATCH
from loadgen.cli.spread import add_spread_options, launcher, spread_engine, workers_overrides

__all__ = ["SUT_HELP", "add_parsers"]

SUT_HELP = ("the system under test: null, sim:..., builtin:MODEL[,key=value...], "
            "http[s]://HOST:PORT/MODEL or grpc[s]://HOST:PORT/MODEL (see `loadgen --help`)")

def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=Path, help="TOML test definition (see scenarios/)")
    p.add_argument("--sut", required=True, metavar="SPEC", help=SUT_HELP)
    p.add_argument("--out", type=Path, required=True, help="output directory (resumable)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def _log(args: argparse.Namespace) -> Callable[[str], None] | None:
    return None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))


def _find_peak(args: argparse.Namespace) -> int:
    from loadgen.campaigns.search import SearchConfig, find_peak
    from loadgen.plan.settings import load_settings
    from loadgen.report.html import build_report

    settings = load_settings(args.file, args.overrides + workers_overrides(args))
    cfg = SearchConfig(start_qps=args.start_qps or settings.target_qps, min_qps=args.min_qps,
                       max_qps=args.max_qps, tolerance=args.tolerance, repeats=args.repeats,
                       min_queries=args.min_queries)
    with spread_engine(args) as engine:
        doc = find_peak(settings, args.sut, args.out, cfg, args.budget_s, launcher(engine),
                        log=_log(args))
    report = build_report(args.out)
    print(doc["headline"])
    print(f"wrote {args.out / 'peak.json'}, {args.out / 'probes.csv'} and {report}")
    return 0 if doc["peak_qps"] else 1


def _sweep(args: argparse.Namespace) -> int:
    from loadgen.campaigns.sweep import parse_axis, run_sweep
    from loadgen.plan.settings import load_settings
    from loadgen.report.html import build_report

    settings = load_settings(args.file, args.overrides + workers_overrides(args))
    axes = [parse_axis(g) for g in args.grid]
    with spread_engine(args) as engine:
        doc = run_sweep(settings, args.sut, axes, args.launches, args.out, launcher(engine),
                        log=_log(args))
    report = build_report(args.out)
    for point in doc["points"]:
        print(_noisy(point) + point["headline"])
    print(f"wrote {args.out / 'sweep.json'}, {args.out / 'sweep.csv'} and {report}")
    return 0


def _noisy(point: dict[str, Any]) -> str:
    """'NOISY (latency_p99_ns cv 8.1%)  ' for a point whose launches disagree, else ''."""
    named = [f"{m} cv {point['stats'][m]['cv']:.1%}" for m in point.get("noisy_metrics", [])]
    return f"NOISY ({', '.join(named)})  " if named else ""


def _report(args: argparse.Namespace) -> int:
    from loadgen.report.html import build_report, report_png

    print(f"wrote {build_report(args.dir)}")
    if args.png:
        print(f"wrote {report_png(args.dir, args.png)}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from loadgen.campaigns.compare import compare, load_side, render

    result = compare(load_side(args.a), load_side(args.b), args.vary)
    if args.json:
        doc = {"a": result.a.label, "b": result.b.label, "mismatch": result.mismatch,
               "differences": [list(d) for d in result.differences],
               "metrics": [asdict(m) | {"noise": m.noise, "rel": m.rel} for m in result.metrics]}
        print(json.dumps(doc, indent=2))
    else:
        print(render(result), end="")
    return EXIT_MISMATCH if result.mismatch else 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register find-peak, sweep, report and compare on the `loadgen` subparsers."""
    p = sub.add_parser("find-peak", help="highest Server QPS that meets the latency SLO")
    _common(p)
    p.add_argument("--budget-s", type=float, default=None, help="stop before exceeding this")
    p.add_argument("--start-qps", type=float, default=0.0, help="first rate (default target_qps)")
    p.add_argument("--min-qps", type=float, default=1.0, help="give up below this rate")
    p.add_argument("--max-qps", type=float, default=1e7, help="never probe above this rate")
    p.add_argument("--tolerance", type=float, default=0.02, help="bracket width / high to stop")
    p.add_argument("--repeats", type=int, default=2, help="trials at each end of the bracket")
    p.add_argument("--min-queries", type=int, default=10_000, help="queries per probe, at least")
    add_spread_options(p, workers=True)
    p.set_defaults(handler=_find_peak)

    p = sub.add_parser("sweep", help="grid of settings and SUT knobs, N launches per point")
    _common(p)
    p.add_argument("--grid", action="append", required=True, metavar="KEY=V1,V2|A:B:STEP",
                   help="a settings key, sut.KEY for a SUT option, or batcher.KEY for a "
                        "knob of a remote `loadgen serve`, retuned live (repeatable: product)")
    p.add_argument("--launches", type=int, default=3, help="independent launches per point")
    add_spread_options(p, workers=True)
    p.set_defaults(handler=_sweep)

    p = sub.add_parser("report", help="rebuild DIR/report.html from saved results")
    p.add_argument("dir", type=Path, help="a run, sweep or find-peak directory")
    p.add_argument("--png", type=Path, default=None, help="also compose the key plots here")
    p.set_defaults(handler=_report)

    p = sub.add_parser("compare", help="A vs B per metric with confidence intervals")
    p.add_argument("a", type=Path, help="run dir, result.json or sweep point dir")
    p.add_argument("b", type=Path, help="run dir, result.json or sweep point dir")
    p.add_argument("--vary", action="append", default=[], metavar="KEY",
                   help="the variable compared (key prefix, e.g. settings.target_qps or sut)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.set_defaults(handler=_compare)
