"""The SUT's memory: its peak host RSS and GPU memory, for result.json `sut_memory`.

In process (`builtin:` SUTs share the load generator's process): the process's own peak RSS
(`getrusage`, so the load generator's share is in it) and, when torch is loaded with CUDA
up, `torch.cuda.max_memory_allocated` summed over devices. Remote: the server's own gauges
where its `/metrics` exposes them (`process_resident_memory_bytes`, DCGM's framebuffer
use), their maxima over the measured window. Torch is never imported here; only a module
already loaded is read.
"""

from __future__ import annotations

import resource
import sys
from typing import Any

__all__ = ["in_process_memory", "remote_memory"]


def _gpu_peak_bytes() -> int | None:
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return None
    return sum(int(cuda.max_memory_allocated(d)) for d in range(cuda.device_count()))


def in_process_memory() -> dict[str, Any]:
    """This process's peak host RSS and CUDA allocations (None where unknown)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return {"where": "in_process", "host_rss_peak_bytes": int(kib) * 1024,
            "gpu_memory_peak_bytes": _gpu_peak_bytes(),
            "source": "getrusage ru_maxrss (load generator included); "
                      "torch.cuda.max_memory_allocated"}


def remote_memory(deltas: dict[str, float | None] | None) -> dict[str, Any]:
    """The server's memory gauges' maxima over the window, from `server_metrics` deltas."""
    d = deltas or {}
    rss, gpu = d.get("server_rss_bytes_max"), d.get("gpu_memory_used_bytes_max")
    return {"where": "remote" if deltas is not None else "not_measured",
            "host_rss_peak_bytes": None if rss is None else int(rss),
            "gpu_memory_peak_bytes": None if gpu is None else int(gpu),
            "source": "the server's /metrics" if deltas is not None
            else "not measured: in process only for torch SUTs; a remote server's gauges need "
                 "server_metrics"}
