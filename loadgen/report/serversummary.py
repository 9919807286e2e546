"""The server's lines of summary.txt: what its own `/metrics` said over the measured window.

Reads a `RunResult` only; no lines when `server_metrics` was off.
"""

from __future__ import annotations

from loadgen.judge.servermetrics import ServerMetrics
from loadgen.report.result import RunResult

__all__ = ["memory_lines", "server_lines"]

_COUNTS = (("preemptions", "preemptions"), ("prompt_tokens", "prompt tokens"),
           ("generation_tokens", "generated tokens"), ("requests_succeeded", "requests"))


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.2f}%"


def _delta_lines(m: ServerMetrics) -> list[str]:
    d = m.deltas
    lines = [(f"            prefix-cache hit rate {_fraction(d.get('prefix_cache_hit_rate'))}, "
              f"KV cache usage max {_fraction(d.get('kv_cache_usage_max'))}, running max "
              f"{d.get('requests_running_max', '-')}, waiting max "
              f"{d.get('requests_waiting_max', '-')}")]
    counts = ", ".join(f"{label} {d[key]:.0f}" for key, label in _COUNTS if d.get(key) is not None)
    if counts:
        lines.append(f"            {counts}")
    if d.get("spec_decode_acceptance_rate") is not None \
            or d.get("spec_decode_mean_acceptance_length") is not None:
        lines.append(f"            spec decode: acceptance rate "
                     f"{_fraction(d.get('spec_decode_acceptance_rate'))}, mean acceptance "
                     f"length {d.get('spec_decode_mean_acceptance_length') or 0:.2f}")
    for name, h in m.histograms.items():
        lines.append(f"            server {name.upper():<6} p50 {h['p50_ns'] / 1e6:.3f}  p90 "
                     f"{h['p90_ns'] / 1e6:.3f}  p99 {h['p99_ns'] / 1e6:.3f} ms (n={h['count']})")
    return lines


def _mib(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:.1f} MiB"


def memory_lines(result: RunResult) -> list[str]:
    """The SUT's peak memory, where it was measured."""
    mem = result.sut_memory
    if not mem or (mem.get("host_rss_peak_bytes") is None
                   and mem.get("gpu_memory_peak_bytes") is None):
        return []
    return [(f"Memory    : SUT peak host RSS {_mib(mem['host_rss_peak_bytes'])}, GPU "
            f"{_mib(mem['gpu_memory_peak_bytes'])} ({mem['where']})")]


def server_lines(result: RunResult) -> list[str]:
    """The server section of the summary (none when not asked), and the SUT's memory."""
    m = result.server_metrics
    if m is None:
        return memory_lines(result)
    if m.source is None or not m.scrapes:
        why = m.reason or (m.errors[0] if m.errors else "no scrape succeeded")
        return ["", f"Server    : no metrics ({why})", *memory_lines(result)]
    servers = "/".join(m.servers) or "unrecognised names"
    head = (f"Server    : {m.source} ({servers}), {m.scrapes} scrapes every "
            f"{m.interval_s:g} s" + (f", {m.failed_scrapes} failed" if m.failed_scrapes else ""))
    return ["", head, *_delta_lines(m), *memory_lines(result)]
