"""The summary's line on agentic jobs (`session_file`): counts, job times, the deadline;
and the same as one row for report.html."""

from __future__ import annotations

from loadgen.judge.jobstats import JobStats

__all__ = ["job_lines", "job_row"]


def job_lines(js: JobStats | None) -> list[str]:
    """One or two lines; none for a run without jobs."""
    if js is None:
        return []
    t = js.time_ns
    lines = [(f"Jobs      : {js.count} started, {js.finished} finished, {js.failed} failed, "
              f"{js.unfinished} unfinished; job time p50 {t['p50'] / 1e6:.3f} ms, "
              f"p99 {t['p99'] / 1e6:.3f} ms (arrival to last answer)")]
    es = js.early_stopping
    if es is not None and js.attainment is not None:
        lines.append(f"            deadline {js.deadline_ms:g} ms: {js.attained} of {js.count} "
                     f"within ({100 * js.attainment:.2f}%); early stop "
                     f"{'passes' if es['passes'] else 'fails'} at p{es['percentile']:g} "
                     f"({es['missed']} missed, {es['max_missed_allowed']} allowed)")
    elif es is not None:
        lines.append(f"            deadline {js.deadline_ms:g} ms: no job was measured")
    return lines


def job_row(js: JobStats) -> dict[str, object]:
    """The jobs' figures as one table row (job times in ms)."""
    row: dict[str, object] = {"jobs": js.count, "finished": js.finished, "failed": js.failed,
                              "unfinished": js.unfinished}
    row |= {f"job time {k} (ms)": js.time_ns[k] / 1e6 for k in ("p50", "p99", "max")}
    if js.early_stopping is not None:
        row |= {"deadline (ms)": js.deadline_ms, "attained": js.attained,
                "early stop": "passes" if js.early_stopping["passes"] else "fails"}
    return row
