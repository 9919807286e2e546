"""One run per directory: `loadgen run --out DIR` onto a directory holding another run's
files is refused unless `--force`, which removes those files first, so a run's result never
sits beside another run's query log, summary or MLPerf logs.

The default `runs/latest` is the exception its name makes: it always holds the latest run,
and is cleared the same way before each. Files that are no run's (anything not named in
`RUN_FILES`) are never touched.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from loadgen.engine.workers.base import WORKERS_DIR
from loadgen.errors import SettingsError
from loadgen.plan.tracefile import SCHEDULE_FILE
from loadgen.record.querylog import BINARY_FILE, CSV_FILE, KINDS_FILE
from loadgen.report.html import REPORT_FILE
from loadgen.report.result import RESULT_FILE
from loadgen.report.rows import SUMMARY_CSV
from loadgen.report.summary import SUMMARY_FILE

__all__ = ["RUN_FILES", "claim_run_dir", "run_files_in"]

RUN_FILES = (RESULT_FILE, f"{RESULT_FILE}.tmp", SUMMARY_FILE, SUMMARY_CSV, REPORT_FILE,
             SCHEDULE_FILE, BINARY_FILE, CSV_FILE, KINDS_FILE, WORKERS_DIR)
"""What a run writes into its directory (besides `mlperf_log_*`)."""
MLPERF_LOGS = "mlperf_log_*"


def run_files_in(out_dir: Path) -> list[Path]:
    """The files (and the workers' folder) of a run found in `out_dir`."""
    if not out_dir.is_dir():
        return []
    found = [out_dir / name for name in RUN_FILES if (out_dir / name).exists()]
    return found + sorted(out_dir.glob(MLPERF_LOGS))


def claim_run_dir(out_dir: Path, force: bool) -> None:
    """Make `out_dir` ready for a new run: refuse one holding another run's files (a
    SettingsError naming them) unless `force`, which removes them first."""
    found = run_files_in(out_dir)
    if not found:
        return
    if not force:
        names = ", ".join(p.name for p in found)
        raise SettingsError([(f"--out {out_dir}: holds another run ({names}); give another "
                             "directory, or --force to replace that run")])
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
