"""The analysis subcommands of `loadgen`: find-peak, sweep, report, compare.

    loadgen find-peak [FILE | --scenario NAME] --sut SPEC --out DIR [--set k=v ...] [--budget-s S]
                      [--goal valid|attainment] [--min-attainment F]
                      [--start-qps Q] [--min-qps Q] [--max-qps Q] [--tolerance F]
                      [--repeats N] [--min-queries N]
    loadgen sweep [FILE | --scenario NAME] --sut SPEC --out DIR --grid KEY=v1,v2|a:b:step [--grid sut.KEY=...]
                  --launches N [--set k=v ...]
    loadgen report DIR
    loadgen compare A B [--vary KEY ...] [--json] [--out DIR]

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

from loadgen.cli import helptext
from loadgen.cli.definition import add_definition_args, definition_path
from loadgen.cli.exits import EXIT_MISMATCH
from loadgen.cli.spread import add_spread_options, launcher, spread_engine, workers_overrides

__all__ = ["add_parsers"]

def _common(p: argparse.ArgumentParser) -> None:
    add_definition_args(p)
    p.add_argument("--sut", required=True, metavar="SPEC", help=helptext.SUT_HELP)
    p.add_argument("--out", type=Path, required=True, metavar="DIR",
                   help="output directory (rerun with the same DIR to resume)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting (repeatable)")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


def _parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, summary: str,
            description: str) -> argparse.ArgumentParser:
    return sub.add_parser(name, help=summary, description=description,
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _log(args: argparse.Namespace) -> Callable[[str], None] | None:
    return None if args.quiet else (lambda line: print(line, file=sys.stderr, flush=True))


def _find_peak(args: argparse.Namespace) -> int:
    from loadgen.campaigns.search import SearchConfig, find_peak
    from loadgen.plan.settings import load_settings
    from loadgen.report.html import build_report
    from loadgen.report.overview import peak_table

    settings = load_settings(definition_path(args), args.overrides + workers_overrides(args))
    cfg = SearchConfig(start_qps=args.start_qps or settings.target_qps, min_qps=args.min_qps,
                       max_qps=args.max_qps, tolerance=args.tolerance, repeats=args.repeats,
                       min_queries=args.min_queries, goal=args.goal,
                       min_attainment=args.min_attainment)
    with spread_engine(args) as engine:
        doc = find_peak(settings, args.sut, args.out, cfg, args.budget_s, launcher(engine),
                        log=_log(args))
    report = build_report(args.out)
    print(peak_table(doc), end="")
    print(doc.headline)
    print(f"wrote {args.out / 'peak.json'}, {args.out / 'probes.csv'} and {report}")
    return 0 if doc.peak_qps else 1


def _sweep(args: argparse.Namespace) -> int:
    from loadgen.campaigns.sweep import parse_axis, run_sweep
    from loadgen.plan.settings import load_settings
    from loadgen.report.headline import noisy_flag
    from loadgen.report.html import build_report
    from loadgen.report.overview import sweep_conditions, sweep_table

    settings = load_settings(definition_path(args), args.overrides + workers_overrides(args))
    axes = [parse_axis(g) for g in args.grid]
    with spread_engine(args) as engine:
        doc = run_sweep(settings, args.sut, axes, args.launches, args.out, launcher(engine),
                        log=_log(args))
    report = build_report(args.out)
    print(sweep_table(doc), end="")
    for point in doc.points:
        if point.noisy:
            print(f"point {point.index}: {noisy_flag(point).strip()}")
    print(f"conditions: {sweep_conditions(doc)}")
    print(f"wrote {args.out / 'sweep.json'}, {args.out / 'sweep.csv'} and {report}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from loadgen.report.html import build_report

    print(f"wrote {build_report(args.dir)}")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from loadgen.campaigns.compare import (
        COMPARE_FILE,
        compare,
        comparison_doc,
        load_side,
        render,
        side_paths,
    )
    from loadgen.report.html import build_report

    result = compare(load_side(args.a), load_side(args.b), args.vary)
    doc = comparison_doc(result)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(render(result), end="")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        doc |= {"a_results": [str(p.resolve()) for p in side_paths(args.a)],
                "b_results": [str(p.resolve()) for p in side_paths(args.b)]}
        (args.out / COMPARE_FILE).write_text(json.dumps(doc, indent=2) + "\n")
        print(f"wrote {args.out / COMPARE_FILE} and {build_report(args.out)}",
              file=sys.stderr if args.json else sys.stdout)
    return EXIT_MISMATCH if result.mismatch else 0


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register find-peak, sweep, report and compare on the `loadgen` subparsers."""
    p = _parser(sub, "find-peak", "highest Server QPS that meets the latency SLO",
                helptext.FIND_PEAK)
    _common(p)
    p.add_argument("--budget-s", type=float, default=None, metavar="S",
                   help="stop before the search takes longer than S seconds (default: none)")
    p.add_argument("--start-qps", type=float, default=0.0, metavar="QPS",
                   help="first rate probed (default: the settings' target_qps)")
    p.add_argument("--min-qps", type=float, default=1.0, metavar="QPS",
                   help="give up below this rate (default 1)")
    p.add_argument("--max-qps", type=float, default=1e7, metavar="QPS",
                   help="never probe above this rate (default 1e7)")
    p.add_argument("--tolerance", type=float, default=0.02, metavar="F",
                   help="stop narrowing when (high - low) / high <= F (default 0.02)")
    p.add_argument("--repeats", type=int, default=2, metavar="N",
                   help="trials at each end of the final bracket (default 2)")
    p.add_argument("--min-queries", type=int, default=10_000, metavar="N",
                   help="queries per probe, at least (default 10000)")
    p.add_argument("--goal", choices=("valid", "attainment"), default="valid",
                   help="a probe passes when VALID, or (token runs) when its SLO attainment "
                        "is at least --min-attainment with 99%% confidence")
    p.add_argument("--min-attainment", type=float, default=0.99,
                   help="goal attainment: the fraction of requests meeting every goodput SLO "
                        "(default 0.99)")
    add_spread_options(p, workers=True)
    p.set_defaults(handler=_find_peak)

    p = _parser(sub, "sweep", "grid of settings and SUT knobs, N launches per point",
                helptext.SWEEP)
    _common(p)
    p.add_argument("--grid", action="append", required=True, metavar="KEY=V1,V2|A:B:STEP",
                   help="a settings key, sut.KEY for a SUT option, or batcher.KEY for a "
                        "knob of a remote `loadgen serve`, retuned live (repeatable: product)")
    p.add_argument("--launches", type=int, default=3, metavar="N",
                   help="independent launches per point (default 3)")
    add_spread_options(p, workers=True)
    p.set_defaults(handler=_sweep)

    p = _parser(sub, "report", "rebuild DIR/report.html from saved results", helptext.REPORT)
    p.add_argument("dir", type=Path, help="a run, sweep, find-peak or comparison (compare --out) directory")
    p.set_defaults(handler=_report)

    p = _parser(sub, "compare", "A vs B per metric with confidence intervals",
                helptext.COMPARE)
    p.add_argument("a", type=Path, help="run dir, result.json or sweep point dir")
    p.add_argument("b", type=Path, help="run dir, result.json or sweep point dir")
    p.add_argument("--vary", action="append", default=[], metavar="KEY",
                   help="the variable compared (key prefix, e.g. settings.target_qps or sut)")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="also write DIR/compare.json and DIR/report.html (A and B overlaid)")
    p.set_defaults(handler=_compare)
