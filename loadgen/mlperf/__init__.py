"""A drop-in for MLCommons LoadGen's Python API (`mlperf_loadgen` 6.x) on our engine.

A file `mlperf_loadgen.py` holding `from loadgen.mlperf import *` makes an
unmodified LoadGen harness run here: the same names, fields, units and
callbacks, LoadGen's log files, and our result.json beside them.
"""

from loadgen.mlperf.bridge import first_token_complete as FirstTokenComplete
from loadgen.mlperf.bridge import query_samples_complete as QuerySamplesComplete
from loadgen.mlperf.start import (
    ConstructQSL,
    ConstructSUT,
    DestroyQSL,
    DestroySUT,
    StartTest,
    StartTestWithLogSettings,
)
from loadgen.mlperf.testsettings import TestSettings
from loadgen.mlperf.types import (
    LoggingMode,
    LogOutputSettings,
    LogSettings,
    QuerySample,
    QuerySampleResponse,
    TestMode,
    TestScenario,
)

__all__ = [
    "ConstructQSL",
    "ConstructSUT",
    "DestroyQSL",
    "DestroySUT",
    "FirstTokenComplete",
    "LogOutputSettings",
    "LogSettings",
    "LoggingMode",
    "QuerySample",
    "QuerySampleResponse",
    "QuerySamplesComplete",
    "StartTest",
    "StartTestWithLogSettings",
    "TestMode",
    "TestScenario",
    "TestSettings",
]
