"""The per-query log: every query's stamps, streamed to disk as the run goes.

During the run rows go to `queries.bin` in fixed little-endian records (no
formatting on the hot path; appended whenever the engine has slack and a
thousand or so rows wait, on each progress tick, and at the latest every
`FLUSH_ROWS` rows, so a crash or Ctrl-C keeps all but the last moments). At the
end `queries.csv` is written from it:

    query_id, scheduled_ns, sent_ns, done_ns, latency_ns, status
    (token runs also) ttft_ns, output_tokens

times relative to the run's start; `latency_ns` is done minus scheduled (the latency the
verdict reads); `ttft_ns` the first token from the schedule; status is ``ok`` or the error
kind (a failed stream's token cells are empty).
A torn last record (a crash mid-write) is ignored (`whole_records`); `read_kinds` reads the
kind codes of a log (a run's, or one worker's part).
"""

from __future__ import annotations

import array
import json
from pathlib import Path

import numpy as np

__all__ = ["BINARY_FILE", "CSV_FILE", "FLUSH_ROWS", "RECORD", "QueryLog", "read_binary",
           "read_kinds", "whole_records"]

BINARY_FILE = "queries.bin"
CSV_FILE = "queries.csv"
KINDS_FILE = "queries.kinds.json"
FLUSH_ROWS = 16_384  # rows buffered at most (~600 KB)
RECORD = np.dtype([("query_id", "<i8"), ("scheduled_ns", "<i8"), ("sent_ns", "<i8"),
                   ("done_ns", "<i8"), ("ttft_ns", "<i8"), ("output_tokens", "<i8"),
                   ("status", "<i4")])
"""One row; `ttft_ns` and `output_tokens` are -1 where a query streamed no tokens."""
_STAMPS = 6  # the int64 columns before status
_RECORD_NAMES: tuple[str, ...] = tuple(RECORD.fields or ())


class QueryLog:
    """Buffers rows and appends them to `queries.bin` in bulk."""

    def __init__(self, out_dir: Path, origin_ns: int = 0) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.out_dir = out_dir
        self.origin_ns = origin_ns
        self._file = open(out_dir / BINARY_FILE, "wb")  # noqa: SIM115 - closed in close()
        self._cols = [array.array("q") for _ in range(_STAMPS)]
        self._status = array.array("i")
        self._kinds: dict[str, int] = {"ok": 0}
        self._kinds_saved = 0
        self.rows = 0
        self.streams = False
        """Whether any row carries tokens (a token run: queries.csv gets their columns)."""

    def add(self, query_id: int, scheduled_ns: int, sent_ns: int, done_ns: int,
            kind: str = "ok", ttft_ns: int = -1, output_tokens: int = -1) -> None:
        """One finished query (the hot call); a token stream's TTFT and output tokens."""
        ids, sched, sent, done, ttft, tokens = self._cols
        ids.append(query_id)
        sched.append(scheduled_ns)
        sent.append(sent_ns)
        done.append(done_ns)
        ttft.append(ttft_ns)
        tokens.append(output_tokens)
        if output_tokens >= 0:
            self.streams = True
        code = self._kinds.get(kind)
        if code is None:
            code = self._kinds[kind] = len(self._kinds)
        self._status.append(code)
        if len(ids) >= FLUSH_ROWS:
            self.flush()

    @property
    def pending(self) -> int:
        """Rows buffered and not yet on disk."""
        return len(self._status)

    def flush(self) -> None:
        """Append buffered rows to disk."""
        n = len(self._status)
        if not n:
            return
        rows = np.empty(n, dtype=RECORD)
        for name, col in zip(_RECORD_NAMES[:_STAMPS], self._cols, strict=True):
            rows[name] = np.frombuffer(col, dtype=np.int64)
            del col[:]
        for name in ("scheduled_ns", "sent_ns", "done_ns"):
            rows[name] -= self.origin_ns
        rows["status"] = np.frombuffer(self._status, dtype=np.int32)
        del self._status[:]
        self._file.write(rows.data)
        self._file.flush()
        self.rows += n
        if len(self._kinds) != self._kinds_saved:  # a new error kind: its name must survive
            (self.out_dir / KINDS_FILE).write_text(json.dumps(self._kinds))
            self._kinds_saved = len(self._kinds)

    def close(self) -> Path:
        """Flush, close, and write `queries.csv` chunk by chunk; returns its path."""
        self.flush()
        self._file.close()
        names = {code: kind for kind, code in self._kinds.items()}
        path = self.out_dir / CSV_FILE
        step = 65536 * RECORD.itemsize
        tokens = self.streams
        with open(self.out_dir / BINARY_FILE, "rb") as src, open(path, "w") as out:
            out.write("query_id,scheduled_ns,sent_ns,done_ns,latency_ns,status"
                      + (",ttft_ns,output_tokens\n" if tokens else "\n"))
            while chunk := src.read(step):
                part = np.frombuffer(whole_records(chunk), dtype=RECORD)
                columns = [part[name].tolist() for name in (
                    "query_id", "scheduled_ns", "sent_ns", "done_ns", "status", "ttft_ns",
                    "output_tokens")]
                out.writelines(_line(q, at, sent, done, status, ttft, count, names, tokens)
                               for q, at, sent, done, status, ttft, count in zip(*columns,
                                                                                 strict=True))
        return path


def _line(query: int, scheduled: int, sent: int, done: int, status: int, ttft: int,
          tokens: int, names: dict[int, str], token_run: bool) -> str:
    """One queries.csv row (token cells empty where the query streamed none)."""
    head = f"{query},{scheduled},{sent},{done},{done - scheduled},{names[status]}"
    if not token_run:
        return head + "\n"
    if tokens < 0:
        return head + ",,\n"
    return head + f",{'' if ttft < 0 else ttft},{tokens}\n"


def read_binary(out_dir: Path) -> tuple[np.ndarray, dict[str, int]]:
    """The rows of a run's `queries.bin` (whole records only) and its kind codes."""
    raw = (out_dir / BINARY_FILE).read_bytes()
    return np.frombuffer(whole_records(raw), dtype=RECORD), read_kinds(out_dir)


def whole_records(data: bytes) -> bytes:
    """`data` cut to whole RECORDs: a torn last one (a crash or a writer mid-write) left out."""
    return data[:len(data) // RECORD.itemsize * RECORD.itemsize]


def read_kinds(out_dir: Path) -> dict[str, int]:
    """The kind codes of the query log in `out_dir` (`ok` alone where none were written)."""
    path = out_dir / KINDS_FILE
    kinds: dict[str, int] = json.loads(path.read_text()) if path.exists() else {"ok": 0}
    return kinds
