"""The official `openai` package in a virtualenv of its own, for the tests that check our
wire against it (its httpx/pydantic need not fit our pins).

Made on first use at `$LOADGEN_OPENAI_VENV` (default `~/.cache/loadgen/openai-3.51.0`) with
`pip install openai==3.51.0` (about 20 s once, from PyPI; reused afterwards); a test that asks
for it skips, saying why, when it cannot be made (no network, no venv module). Made under a
lock file beside it: two pytest-xdist workers asking at once make it once.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import venv
from pathlib import Path

import pytest

OPENAI = "openai==3.51.0"
VENV = Path(os.environ.get("LOADGEN_OPENAI_VENV",
                           Path.home() / ".cache" / "loadgen" / "openai-3.51.0"))


def openai_python() -> Path:
    """The virtualenv's python with `openai` installed, made once; skips when it cannot be."""
    python = VENV / "bin" / "python"
    marker = VENV / ".installed"
    try:
        VENV.parent.mkdir(parents=True, exist_ok=True)
        with open(VENV.with_name(VENV.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if marker.exists() and marker.read_text() == OPENAI:
                return python
            venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
            subprocess.run([python, "-m", "pip", "install", "-q", "--retries", "1",
                            "--timeout", "15", OPENAI], check=True, timeout=600,
                           capture_output=True)
            marker.write_text(OPENAI)
    except (OSError, subprocess.SubprocessError) as exc:
        pytest.skip(f"cannot make the openai package's virtualenv at {VENV}: {exc}")
    return python
