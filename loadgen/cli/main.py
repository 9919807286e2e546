"""The `loadgen` command: parse, build settings and SUT, call the library, report, exit.

Exit codes: 0 VALID (find-peak: some rate passed), 1 INVALID (find-peak: none did),
2 bad usage or settings, 3 the run failed (SUT error, or any crash), 4 `compare` found a
construct mismatch.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from loadgen.cli import helptext
from loadgen.cli.analysis import add_parsers as _add_analysis
from loadgen.cli.calibrate import add_parser as _add_calibrate
from loadgen.cli.definition import add_definition_args, definition_path
from loadgen.cli.discover import add_parsers as _add_discover
from loadgen.cli.discover import version_text
from loadgen.cli.exits import EXIT_ERROR, EXIT_INVALID, EXIT_USAGE, EXIT_VALID
from loadgen.cli.serve import add_parser as _add_serve
from loadgen.cli.spread import add_spread_options, spread_engine
from loadgen.errors import LoadgenError, SettingsError, SutSpecError

if TYPE_CHECKING:
    from loadgen.plan.settings import TestSettings

__all__ = ["build_parser", "main"]

T = TypeVar("T")
LATEST = Path("runs/latest")


def _add_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run one test definition against a SUT",
                       description=helptext.RUN,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_definition_args(p)
    p.add_argument("--sut", required=True, metavar="SPEC", help=helptext.SUT_HELP)
    p.add_argument("--out", type=Path, default=None, metavar="DIR",
                   help=f"run directory (default {LATEST}, replaced each run); one that holds "
                        "another run is refused unless --force")
    p.add_argument("--force", action="store_true",
                   help="--out DIR holds another run: remove that run's files first")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a setting (repeatable)")
    p.add_argument("--quiet", action="store_true",
                   help="no plan line, no progress, no summary")
    p.add_argument("--workers", type=int, metavar="N",
                   help="N load processes, each issuing a share of the schedule (open loop)")
    p.add_argument("--replay", type=Path, metavar="RUN_DIR",
                   help="rerun RUN_DIR's settings on its saved schedule.bin, bit for bit")
    p.add_argument("--prometheus-port", metavar="[HOST:]PORT",
                   help="serve live metrics on /metrics during the run (host 127.0.0.1)")
    p.add_argument("--pushgateway", metavar="URL", help="push the final metrics there")
    p.add_argument("--mlperf-logs", action="store_true",
                   help="also write LoadGen's mlperf_log_summary.txt, mlperf_log_detail.txt and "
                        "mlperf_log_accuracy.json beside result.json")
    p.add_argument("--mlperf-conf", type=Path, metavar="FILE",
                   help="an mlperf.conf read as a settings layer (after the TOML file)")
    p.add_argument("--user-conf", type=Path, metavar="FILE",
                   help="a user.conf read as a settings layer (after --mlperf-conf)")
    p.add_argument("--model", default="*", metavar="NAME",
                   help="the model name the conf files' keys are looked up for (default '*')")
    add_spread_options(p)
    p.set_defaults(handler=_run)


def _settings(args: argparse.Namespace) -> TestSettings:
    from loadgen.plan.schedule import replay_settings
    from loadgen.plan.settings import load_settings

    overrides = args.overrides + ([] if args.workers is None else [f"workers={args.workers}"])
    if args.replay is not None:
        return replay_settings(args.replay, overrides)
    path = definition_path(args)
    if args.mlperf_conf or args.user_conf:
        from loadgen.mlperf.layer import conf_overrides

        scenario = str(load_settings(path, overrides).scenario)
        overrides = conf_overrides(args.model, scenario, args.mlperf_conf, args.user_conf) + \
            overrides
    return load_settings(path, overrides)


def _run(args: argparse.Namespace) -> int:
    from loadgen.api import run_test
    from loadgen.campaigns.calibrate import headroom_warning
    from loadgen.cli.rundir import claim_run_dir
    from loadgen.engine.workers.processes import workers_warning
    from loadgen.live.display import progress_view
    from loadgen.live.prometheus import check_pushgateway, monitors_for
    from loadgen.mlperf.runlogs import OutputWatch, write_run_logs
    from loadgen.plan.plan import RunPlan
    from loadgen.report.html import build_report
    from loadgen.report.summary import render_summary

    plan = RunPlan.of(_settings(args))
    if args.pushgateway:
        check_pushgateway(args.pushgateway)
    out = args.out or LATEST
    if args.replay is not None and out.resolve() == args.replay.resolve():
        raise SettingsError([(f"--replay {args.replay}: the new run would replace the one it "
                             "replays; give --out another directory")])
    claim_run_dir(out, args.force or args.out is None)
    args.out = out
    warnings = [w for w in (headroom_warning(plan, args.sut),
                            workers_warning(plan.settings, args.sut)) if w]
    for warning in warnings:
        print(f"loadgen: warning: {warning}", file=sys.stderr)
    progress = None if args.quiet else progress_view(plan)
    if progress is not None:
        progress.announce()
    watch = OutputWatch()  # an accuracy run's outputs, for --mlperf-logs
    with (monitors_for(args.prometheus_port, args.pushgateway) as monitors,
          spread_engine(args) as engine, progress or contextlib.nullcontext()):
        result = run_test(plan, args.sut, args.out, progress,
                          [*monitors, watch] if args.mlperf_logs else monitors, warnings, engine)
    report = _derived("report.html", lambda: build_report(args.out))
    if args.mlperf_logs:
        _derived("the MLPerf logs", lambda: write_run_logs(plan, result, args.out, watch.outputs))
    if not args.quiet:
        _derived("the summary", lambda: print(render_summary(result), end=""))
        print(f"wrote {args.out / 'result.json'}, {args.out / 'summary.txt'}"
              + ("" if report is None else f" and {report}"))
    return EXIT_VALID if result.valid else EXIT_INVALID


def _derived(what: str, make: Callable[[], T]) -> T | None:
    """Something derived from the saved result: its failure is reported, never the run's."""
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - result.json is written; report and go on
        print(f"loadgen: warning: {what} failed: {exc!r}", file=sys.stderr)
        return None


DESCRIPTION = """\
Measure an inference server the way MLPerf does: issue SingleStream, MultiStream,
Server (Poisson) or Offline traffic on a precomputed schedule, time every query from
when it was due (no coordinated omission), and judge the run VALID or INVALID with
its reasons. `loadgen run` one test, `find-peak` the highest rate that meets a
latency SLO, `sweep` a grid of settings, `report` and `compare` saved runs,
`calibrate` this harness, `serve` a model over the Open Inference Protocol
(or an LLM over OpenAI-compatible HTTP).

SUT specs (--sut), one of:
  {forms}

Start here:  loadgen run scenarios/server.toml --sut sim:service=exp:2ms --set preset=dev
User guide:  {guide}

Exit codes: 0 VALID (find-peak: some rate passed), 1 INVALID (none did), 2 bad usage,
settings or SUT spec, 3 the run failed (the SUT could not start, or loadgen crashed),
4 compare found a construct mismatch.
"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    from loadgen.adapters.registry import SPEC_FORMS

    parser = argparse.ArgumentParser(
        prog="loadgen", description=DESCRIPTION.format(forms="\n  ".join(SPEC_FORMS.split(" | ")), guide=helptext.GUIDE),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=version_text())
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_analysis(sub)
    _add_calibrate(sub)
    _add_serve(sub)
    _add_discover(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `loadgen` console script."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args))
    except (SettingsError, SutSpecError) as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except LoadgenError as exc:
        print(f"loadgen: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except Exception:  # noqa: BLE001 - a crash: the run failed, never INVALID's exit code
        traceback.print_exc()
        print(f"loadgen: {args.command} crashed (a bug: the traceback above says where)",
              file=sys.stderr)
        return EXIT_ERROR

