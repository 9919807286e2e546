"""The server's gauges over time, on the client's time axis (seconds from the run's start,
as the latency and throughput charts'): running and waiting requests, and KV cache usage."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.report.charts import Chart, axes_layout

__all__ = ["server_chart"]

_COUNTS = (("requests_running", "running"), ("requests_waiting", "waiting"))


def server_chart(series: Mapping[str, Sequence[Sequence[float]]],
                 timeline: Sequence[Mapping[str, Any]] = ()) -> Chart | None:
    """Running and waiting requests (left axis), KV cache usage in % (right) and, from the
    client's windows, its p99 latency (ms, a second right axis); None without server series."""
    data: list[dict[str, Any]] = []
    for key, name in _COUNTS:
        points = series.get(key) or []
        if points:
            data.append({"type": "scatter", "mode": "lines", "name": name,
                         "x": [t for t, _ in points], "y": [v for _, v in points]})
    usage = series.get("kv_cache_usage") or []
    if usage:
        data.append({"type": "scatter", "mode": "lines", "name": "KV cache usage (%)",
                     "x": [t for t, _ in usage], "y": [100 * v for _, v in usage],
                     "yaxis": "y2", "line": {"dash": "dot"}})
    if not data:
        return None
    if timeline:
        data.append({"type": "scatter", "mode": "markers", "name": "client p99 (ms)",
                     "x": [(float(w["start_s"]) + float(w["end_s"])) / 2 for w in timeline],
                     "y": [(w.get("latency_ns", {}).get("p99") or 0) / 1e6 for w in timeline],
                     "yaxis": "y3", "marker": {"symbol": "diamond"}})
    layout = axes_layout("time (s)", "requests",
                         yaxis2={"title": {"text": "KV cache usage (%)"}, "overlaying": "y",
                                 "side": "right", "range": [0, 100]},
                         yaxis3={"title": {"text": "client p99 (ms)"}, "overlaying": "y",
                                 "side": "right", "anchor": "free", "position": 1.0,
                                 "showgrid": False})
    return Chart("Server: requests and KV cache over time", data, layout)
