"""The energy block in words: summary.txt's lines and report.html's table."""

from __future__ import annotations

import html

from loadgen.judge.energy import EnergyFigures

__all__ = ["energy_html", "energy_lines"]


def _num(value: float | None, unit: str, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f} {unit}".strip()


def _sig(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.4g} {unit}".strip()


def energy_lines(e: EnergyFigures | None) -> list[str]:
    """The summary's energy lines (none for a result written before energy was measured)."""
    if e is None:
        return []
    if not e.measured:
        return [f"Energy    : not measured: {e.reason}"]
    lines = [(f"Energy    : {_num(e.joules, 'J')} over {_num(e.window_s, 's')}, avg "
              f"{_num(e.avg_w, 'W', 1)}, peak {_num(e.peak_w, 'W', 1)}, idle "
              f"{_num(e.idle_w, 'W', 1)}; {_sig(e.joules_per_query, 'J/query')}, "
              f"{_sig(e.qps_per_watt, 'QPS/W')}, {_sig(e.samples_per_s_per_watt, 'samples/s/W')}"
              + (f", {_sig(e.tokens_per_joule, 'tokens/J')}" if e.tokens_per_joule else ""))]
    lines.append(f"  boundary: {', '.join(f'{d.name} ({d.model})' for d in e.devices)} on "
                 f"{e.host}; {e.method} at {e.sample_hz:g} Hz, {e.samples} readings")
    lines += [f"  not read: {u.source}: {u.reason}" for u in e.unmeasured]
    return lines


_COLUMNS = (("device", "name"), ("model", "model"), ("method", "method"),
            ("joules", "joules"), ("avg W", "avg_w"), ("peak W", "peak_w"),
            ("idle W", "idle_w"), ("util % avg", "util_pct_avg"),
            ("memory peak (MiB)", "memory_used_peak_bytes"), ("SM MHz avg", "sm_clock_mhz_avg"),
            ("temp C max", "temp_c_max"))


def _cell(value: object, scale: float = 1.0) -> str:
    if value is None:
        return "<td>-</td>"
    if isinstance(value, float | int):
        scaled = value * scale
        return f"<td>{scaled:.4g}</td>" if abs(scaled) < 1e4 else f"<td>{scaled:.0f}</td>"
    return f'<td class="l">{html.escape(str(value))}</td>'


def energy_html(e: EnergyFigures | None) -> str:
    """report.html's energy section: the run's figures and a row per device."""
    if e is None:
        return ""
    if not e.measured:
        return f"<h2>Energy</h2><p>Not measured: {html.escape(e.reason or '')}</p>"
    head = (("joules", e.joules), ("window s", e.window_s), ("avg W", e.avg_w),
            ("peak W", e.peak_w), ("idle W", e.idle_w), ("active J", e.active_joules),
            ("J/query", e.joules_per_query), ("QPS/W", e.qps_per_watt),
            ("samples/s/W", e.samples_per_s_per_watt), ("tokens/J", e.tokens_per_joule),
            ("method", e.method), ("sample Hz", e.sample_hz), ("host", e.host))
    rows = ["<tr>" + "".join(f"<th>{html.escape(k)}</th>" for k, _ in head) + "</tr>",
            "<tr>" + "".join(_cell(v) for _, v in head) + "</tr>"]
    devices = ["<tr>" + "".join(f"<th>{html.escape(k)}</th>" for k, _ in _COLUMNS) + "</tr>"]
    for d in e.devices:
        devices.append("<tr>" + "".join(
            _cell(getattr(d, attr), 2.0**-20 if attr == "memory_used_peak_bytes" else 1.0)
            for _, attr in _COLUMNS) + "</tr>")
    missing = "".join(f"<p>Not read: {html.escape(u.source)}: {html.escape(u.reason)}</p>"
                      for u in e.unmeasured)
    return (f"<h2>Energy</h2><table>{''.join(rows)}</table>"
            f"<table>{''.join(devices)}</table>{missing}")
