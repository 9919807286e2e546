"""LoadGen's entry points: construct a SUT and a QSL, start a test, destroy them.

`StartTest` runs on our engine: the QSL's load callback gets the performance
sample set (every sample for accuracy), the test runs as one session per part
(SubmissionRun: accuracy, then performance; FindPeakPerformance: our find-peak
over Server rates), each inside the wiring every run has (`engine.watch.RunWatch`:
energy meter, server scraper), and LoadGen's logs are written to the log
output directory, with our result.json and summary.txt beside them.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from loadgen.api import judge, run_test, save_run
from loadgen.campaigns.search import SearchConfig, find_peak
from loadgen.engine.session import SessionOutcome, run_loop, run_session
from loadgen.engine.watch import RunWatch
from loadgen.errors import SettingsError
from loadgen.mlperf.bridge import HarnessSut, IssueCallback
from loadgen.mlperf.derive import effective, plan_for
from loadgen.mlperf.figures import LogRun
from loadgen.mlperf.logs import log_names, write_logs
from loadgen.mlperf.testsettings import TestSettings
from loadgen.mlperf.types import LogSettings, TestMode, TestScenario
from loadgen.plan.plan import RunPlan
from loadgen.record.tally import Tally
from loadgen.report.result import RunResult

__all__ = ["ConstructQSL", "ConstructSUT", "DestroyQSL", "DestroySUT", "StartTest",
           "StartTestWithLogSettings"]

SampleCallback = Callable[[list[int]], None]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Sut:
    name: str
    issue: IssueCallback
    flush: Callable[[], None]


@dataclass(frozen=True, slots=True)
class _Qsl:
    name: str
    total: int
    performance_count: int
    load: SampleCallback
    unload: SampleCallback


_handles = itertools.count(1)
_suts: dict[int, _Sut] = {}
_qsls: dict[int, _Qsl] = {}


def ConstructSUT(issue_cb: IssueCallback, flush_cb: Callable[[], None]) -> int:
    """A SUT handle over the harness's issue and flush callbacks."""
    handle = next(_handles)
    _suts[handle] = _Sut("PySUT", issue_cb, flush_cb)
    return handle


def ConstructQSL(total: int, performance_count: int, load_cb: SampleCallback,
                 unload_cb: SampleCallback) -> int:
    """A QSL handle: its size, how many samples fit in memory, its load and unload callbacks."""
    if not 0 < performance_count <= total:
        raise SettingsError([(f"ConstructQSL: need 0 < performance_count ({performance_count}) "
                             f"<= total ({total})")])
    handle = next(_handles)
    _qsls[handle] = _Qsl("PyQSL", total, performance_count, load_cb, unload_cb)
    return handle


def DestroySUT(sut: int) -> None:
    """Forget a SUT handle."""
    _suts.pop(sut, None)


def DestroyQSL(qsl: int) -> None:
    """Forget a QSL handle."""
    _qsls.pop(qsl, None)


def StartTest(sut: int, qsl: int, test_settings: TestSettings,
              audit_config_filename: str = "audit.config") -> None:
    """Run a test with the default log settings (logs in the working directory)."""
    StartTestWithLogSettings(sut, qsl, test_settings, LogSettings(), audit_config_filename)


def StartTestWithLogSettings(sut: int, qsl: int, test_settings: TestSettings,
                             log_settings: LogSettings,
                             audit_config_filename: str = "audit.config") -> None:
    """Run a test; its logs go where `log_settings.log_output` says.

    `audit_config_filename` is accepted for LoadGen's signature; audit (compliance
    test) configs are not read.
    """
    s, q = _handle(_suts, sut, "SUT"), _handle(_qsls, qsl, "QSL")
    mode = TestMode(test_settings.mode)
    out = log_settings.log_output
    outdir = Path(out.outdir)
    if mode is TestMode.FindPeakPerformance:
        _find_peak(s, q, test_settings, outdir)
        return
    trace = log_settings.enable_trace
    accuracy = perf = None
    if mode in (TestMode.SubmissionRun, TestMode.AccuracyOnly):
        accuracy = _run_part(s, q, test_settings, accuracy=True, trace=trace)
    if mode in (TestMode.SubmissionRun, TestMode.PerformanceOnly):
        perf = _run_part(s, q, test_settings, accuracy=False, trace=trace)
        for what, exc in save_run(perf.plan, perf.result, outdir):  # result.json is written
            print(f"loadgen: warning: {what} failed: {exc!r}", file=sys.stderr)
    shown = perf or accuracy
    assert shown is not None
    tokens = perf.tally.tokens if perf is not None and test_settings.use_token_latencies \
        else None
    run = LogRun(
        scenario=TestScenario(test_settings.scenario).name, mode=mode.name,
        effective=effective(test_settings, q.total, q.performance_count),
        requested=test_settings.as_dict(), result=None if perf is None else perf.result,
        sut_name=s.name, qsl_name=q.name, total=q.total,
        performance_count=q.performance_count, loaded=shown.loaded,
        accuracy=(accuracy or shown).bridge.accuracy,
        token_hists=None if tokens is None else tokens.histograms,
        token_counters={} if tokens is None else tokens.counters,
        use_tokens=test_settings.use_token_latencies,
        trace=shown.bridge.trace if trace else None, trace_start_ns=shown.bridge.start_ns)
    paths = log_names(outdir, out.prefix, out.suffix, out.prefix_with_datetime)
    write_logs(run, paths)
    if out.copy_summary_to_stdout:
        sys.stdout.write(paths["summary"].read_text())


def _handle(table: dict[int, T], handle: int, what: str) -> T:
    try:
        return table[handle]
    except KeyError:
        raise SettingsError([(f"StartTest: {what} handle {handle} is not constructed "
                             "(or was destroyed)")]) from None


def _bridge(s: _Sut, settings: TestSettings, *, accuracy: bool, trace: bool) -> HarnessSut:
    return HarnessSut(s.name, s.issue, s.flush, log_all=accuracy,
                      log_probability=0.0 if accuracy else settings.accuracy_log_probability,
                      log_seed=settings.accuracy_log_rng_seed,
                      tokens=settings.use_token_latencies, trace=trace)


@dataclass(frozen=True, slots=True)
class _Part:
    """One run of a test (its accuracy or its performance part) and what it left."""

    plan: RunPlan
    result: RunResult
    bridge: HarnessSut
    loaded: list[int]
    tally: Tally


def _run_part(s: _Sut, q: _Qsl, settings: TestSettings, *, accuracy: bool,
              trace: bool) -> _Part:
    """One accuracy or performance run, its samples loaded around it."""
    plan = plan_for(settings, q.total, q.performance_count, accuracy=accuracy)
    loaded = list(range(plan.library.total)) if accuracy else \
        plan.library.loaded_indices().tolist()
    bridge = _bridge(s, settings, accuracy=accuracy, trace=trace)
    q.load(loaded)
    try:
        with RunWatch[RunResult](plan, bridge) as watch:
            outcome: SessionOutcome = run_loop(run_session(plan, bridge, watch=watch))
            result = judge(plan, outcome, server=watch.server())
            watch.finish(result)
    finally:
        q.unload(loaded)
    return _Part(plan, result, bridge, loaded, outcome.tally)


def _find_peak(s: _Sut, q: _Qsl, settings: TestSettings, outdir: Path) -> None:
    """FindPeakPerformance: our find-peak from `server_target_qps`; peak.json in `outdir`."""
    if TestScenario(settings.scenario) is not TestScenario.Server:
        raise SettingsError(["FindPeakPerformance: the Server scenario only (as in LoadGen)"])
    plan = plan_for(settings, q.total, q.performance_count, accuracy=False)
    loaded = plan.library.loaded_indices().tolist()
    cfg = SearchConfig(start_qps=max(settings.server_target_qps, 1.0),
                       min_queries=settings.min_query_count)
    q.load(loaded)
    try:
        find_peak(plan.settings, f"mlperf:{s.name}", outdir, cfg,
                  runner=lambda st, _spec, run_dir: run_test(
                      st, _bridge(s, settings, accuracy=False, trace=False), run_dir))
    finally:
        q.unload(loaded)
