"""Where a run happened: Python, packages, CPU, GPU, git commit."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
import sys
from pathlib import Path
from typing import Any

from loadgen.plan.version import VERSION

__all__ = ["environment"]

_PACKAGES = ("loadgen", "numpy", "hdrhistogram", "uvloop", "aiohttp", "grpcio", "protobuf",
             "prometheus-client", "torch", "scikit-learn")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpus() -> list[str]:
    torch = sys.modules.get("torch")  # only if the run already loaded it
    if torch is None or not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def _git_commit() -> str | None:
    root = Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def _version(name: str) -> str | None:
    if name == "loadgen":  # the source's own, installed or not
        return VERSION
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment() -> dict[str, Any]:
    """A description of this machine and software, for result.json."""
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in _PACKAGES},
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "gpus": _gpus(),
        "git_commit": _git_commit(),
    }
