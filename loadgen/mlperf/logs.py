"""LoadGen's log files, named and written: summary, detail, accuracy log, trace.

The accuracy log is a JSON array of {seq_id, qsl_idx, data (hex)[, token_count]}
in completion order; the trace is Chrome trace-event JSON, one event per sample
from its issue to its completion. Summary and detail come from `summary` and
`detail`.
"""

from __future__ import annotations

import datetime
import json
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from loadgen.mlperf.detail import detail_text
from loadgen.mlperf.figures import LogRun
from loadgen.mlperf.summary import summary_text

__all__ = ["accuracy_text", "log_names", "trace_text", "write_logs"]


def log_names(outdir: str | Path, prefix: str = "mlperf_log_", suffix: str = "",
              with_datetime: bool = False) -> dict[str, Path]:
    """The four files' paths, named as LoadGen names them."""
    if with_datetime:
        prefix = datetime.datetime.now().strftime("%Y-%m-%d_%H-%M-%S") + "_" + prefix
    base = Path(outdir)
    return {kind: base / f"{prefix}{kind}{suffix}{ext}" for kind, ext in (
        ("summary", ".txt"), ("detail", ".txt"), ("accuracy", ".json"), ("trace", ".json"))}


def write_logs(run: LogRun, paths: dict[str, Path]) -> None:
    """Write summary, detail and accuracy log (and the trace when `run.trace` is given)."""
    paths["summary"].parent.mkdir(parents=True, exist_ok=True)
    paths["summary"].write_text(summary_text(run))
    paths["detail"].write_text(detail_text(run))
    paths["accuracy"].write_text(accuracy_text(run.accuracy, run.use_tokens))
    if run.trace is not None:
        paths["trace"].write_text(trace_text(run.trace, run.trace_start_ns))


def accuracy_text(rows: Iterable[Any], tokens: bool) -> str:
    """mlperf_log_accuracy.json: one object per logged sample."""
    items = []
    for row in rows:
        item: dict[str, Any] = {"seq_id": row.seq_id, "qsl_idx": row.qsl_idx,
                                "data": row.data.hex().upper()}
        if tokens:
            if row.token_data is not None:
                item["token_data"] = row.token_data.hex().upper()
            item["token_count"] = row.n_tokens
        items.append("{ " + ", ".join(f"{json.dumps(k)} : {json.dumps(v)}"
                                      for k, v in item.items()) + " }")
    return "[\n" + ",\n".join(items) + ("\n" if items else "") + "]\n"


def trace_text(samples: Iterable[tuple[int, int, int, int, int]], start_ns: int) -> str:
    """Chrome trace events: each sample from its issue to its completion, in µs."""
    pid, tid = os.getpid(), threading.get_ident()
    events = [json.dumps({"name": "Sample", "ph": "X", "pid": pid, "tid": tid,
                          "ts": (issued - start_ns) / 1e3, "dur": (done - issued) / 1e3,
                          "args": {"sample_seq": seq, "query_seq": query, "sample_idx": index}})
              for seq, query, index, issued, done in samples]
    return '{"traceEvents":[\n' + ",\n".join(events) + "\n]}\n"
