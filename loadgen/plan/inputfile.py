"""A user's input file (a dataset, a trace, a session file): its text, its JSON rows (one
JSON object, or every line of JSON lines with its number), and the error that names the
setting, file, line and field of a bad row."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.errors import SettingsError

__all__ = ["InputFile"]


@dataclass(frozen=True, slots=True)
class InputFile:
    """The reader of the files one setting names (`dataset`, `trace_file`): each error
    starts with the setting."""

    setting: str

    def bad_row(self, path: str | Path, line: int, field: str, message: str) -> SettingsError:
        """The error for one bad row: `SETTING: FILE:LINE: FIELD: message`."""
        return SettingsError([f"{self.setting}: {path}:{line}: {field}: {message}"])

    def read_text(self, path: str | Path) -> str:
        """The file as UTF-8 text (a SettingsError naming it when it cannot be read)."""
        try:
            return Path(path).read_bytes().decode("utf-8")
        except OSError as exc:
            raise SettingsError([(f"{self.setting}: cannot read {str(path)!r}: "
                                 f"{exc.strerror or exc}")]) from None
        except UnicodeDecodeError as exc:
            raise SettingsError([f"{self.setting}: {path}: not UTF-8 text (byte {exc.start})"]) \
                from None

    def json_row(self, text: str, path: str | Path, line: int) -> dict[str, Any]:
        """One JSONL row, which must be a JSON object."""
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise self.bad_row(path, line, "row", f"not JSON: {exc.msg}") from None
        if not isinstance(row, dict):
            raise self.bad_row(path, line, "row", "expected a JSON object")
        return row

    def json_lines(self, text: str, path: str | Path, field: str) -> list[tuple[int, Any]]:
        """(line number, value) of each non-blank line of JSON lines; a line that is not JSON
        is refused as `field` (`FIELD: not JSON: ...`)."""
        out = []
        for line, row in enumerate(text.splitlines(), start=1):
            if row.strip():
                try:
                    out.append((line, json.loads(row)))
                except json.JSONDecodeError as exc:
                    raise self.bad_row(path, line, field, f"not JSON: {exc.msg}") from None
        return out
