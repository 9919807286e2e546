"""The plain value types of the `mlperf_loadgen` API: enums, samples, responses, log settings.

Names, members and defaults follow MLCommons LoadGen 6.x's Python binding, so a
harness written against it reads the same here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["LogOutputSettings", "LogSettings", "LoggingMode", "QuerySample",
           "QuerySampleResponse", "TestMode", "TestScenario"]


class TestScenario(enum.IntEnum):
    """LoadGen's four scenarios, values as in the binding."""

    __test__ = False  # not a pytest test class

    SingleStream = 0
    MultiStream = 1
    Server = 2
    Offline = 3


class TestMode(enum.IntEnum):
    """What a LoadGen test does: accuracy, performance, both, or a search for the peak."""

    __test__ = False

    SubmissionRun = 0
    AccuracyOnly = 1
    PerformanceOnly = 2
    FindPeakPerformance = 3


class LoggingMode(enum.IntEnum):
    """When LoadGen writes its logs; every mode writes them at the end of the test here."""

    AsyncPoll = 0
    EndOfTestOnly = 1
    Synchronous = 2


@dataclass(slots=True)
class QuerySample:
    """One sample of an issued query: `id` to answer with, `index` into the QSL."""

    id: int = 0
    index: int = 0


@dataclass(slots=True, init=False)
class QuerySampleResponse:
    """A sample's answer: its id, the address and size of its bytes, and its token count."""

    id: int
    data: int
    size: int
    n_tokens: int

    def __init__(self, id: int = 0, data: int = 0, size: int = 0,
                 n_tokens: int = 0) -> None:
        self.id, self.data, self.size, self.n_tokens = id, data, size, n_tokens


@dataclass(slots=True)
class LogOutputSettings:
    """Where the logs go: `outdir/prefix` + name + `suffix` (optionally a datetime prefix)."""

    outdir: str = "."
    prefix: str = "mlperf_log_"
    suffix: str = ""
    prefix_with_datetime: bool = False
    copy_detail_to_stdout: bool = False
    copy_summary_to_stdout: bool = False


@dataclass(slots=True)
class LogSettings:
    """The log output and whether a trace is written (`mlperf_log_trace.json`)."""

    log_output: LogOutputSettings = field(default_factory=LogOutputSettings)
    log_mode: LoggingMode = LoggingMode.AsyncPoll
    log_mode_async_poll_interval_ms: int = 1000
    enable_trace: bool = True
