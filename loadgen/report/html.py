"""report.html: one self-contained page (inline base64 PNG plots, inline CSS) rebuilt from
the saved files of a run directory (result.json), a sweep (sweep.json) or a find-peak
search (peak.json). Reads files only: no clock, no network, so old runs re-render.

Plots: latency percentiles against offered load with the SLO line and the knee, goodput
against load (sweeps and searches); the percentile spectrum from the HDR histograms;
latency over time (result.json `timeline`, when present); batch sizes and components
(when the SUT reports them).
"""

from __future__ import annotations

import base64
import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loadgen.errors import ResultError
from loadgen.record.histograms import decode
from loadgen.report.headline import peak_headline, point_headline, run_headline
from loadgen.report.result import RunResult, read_result
from loadgen.report.tokensummary import TOKEN_COLUMNS, token_rows

__all__ = ["REPORT_FILE", "build_report", "load_kind", "report_png"]

REPORT_FILE = "report.html"
_MAX_SPECTRA = 6
_MIN_WINDOWS = 3  # a timeline of fewer windows says nothing

_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em}table{border-collapse:collapse;
font-size:.85em;display:block;overflow-x:auto}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}.bad{color:#b00}.warn{color:#a60}
img{max-width:100%;display:block;margin:.5em 0}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:0 1.5em}"""


def load_kind(path: Path) -> tuple[str, Any]:
    """('find-peak' | 'sweep', document) or ('run', RunResult) for a directory (or a file
    in one)."""
    root = path if path.is_dir() else path.parent
    for name, kind in (("peak.json", "find-peak"), ("sweep.json", "sweep")):
        if (root / name).is_file():
            try:
                return kind, json.loads((root / name).read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ResultError(f"{root / name}: cannot read: {exc}") from None
    return "run", read_result(root)


def _img(data: bytes, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,' \
           f'{base64.b64encode(data).decode("ascii")}">'


def _table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = []
        for c in columns:
            v = row.get(c)
            text = f"{v:.6g}" if isinstance(v, float) else "" if v is None else str(v)
            cells.append(f"<td>{html.escape(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _slo_ns(settings: Mapping[str, Any]) -> float | None:
    return float(settings.get("target_latency_ms") or 0) * 1e6 or None


def _hists(results: Mapping[str, RunResult],
           key: str = "query_latency_ns") -> dict[str, Any]:
    return {label: decode(r.stats.histograms[key]) for label, r in results.items()
            if key in r.stats.histograms}


def _search_points(doc: Mapping[str, Any]) -> list[Any]:
    from loadgen.report.plots import LoadPoint

    return [LoadPoint(float(p["target_qps"]), p["latency_ns"], float(p["qps_completed"]),
                      float(p["goodput_qps"]), bool(p["valid"])) for p in doc["probes"]]


def _sweep_axis(doc: Mapping[str, Any]) -> str:
    grid = doc["grid"]
    numeric = [k for k, vs in grid.items() if all(isinstance(v, int | float) for v in vs)]
    return "target_qps" if "target_qps" in grid else (numeric or list(grid))[0]


def _sweep_points(doc: Mapping[str, Any]) -> list[Any]:
    from loadgen.report.plots import LoadPoint

    axis = _sweep_axis(doc)
    out = []
    for p in doc["points"]:
        st = p["stats"]
        lat = {n: st[f"latency_{n}_ns"] for n in ("p50", "p90", "p99")}
        group = ", ".join(f"{k}={v}" for k, v in p["values"].items() if k != axis)
        x = p["values"][axis]
        out.append(LoadPoint(float(x) if isinstance(x, int | float) else float(p["index"]),
                             {n: s["median"] for n, s in lat.items()},
                             st["qps_completed"]["median"], st["goodput_qps"]["median"],
                             p["valid_launches"] == st["headline"]["n"], group,
                             {n: s["min"] for n, s in lat.items()},
                             {n: s["max"] for n, s in lat.items()}))
    return out


def _run_draws(result: RunResult, root: Path) -> list[tuple[str, Any]]:
    from loadgen.report import plots

    r = result.stats
    slo = _slo_ns(result.settings.as_dict())
    draws: list[tuple[str, Any]] = []
    hists = _hists({"from schedule": result}) | _hists({"service, from send": result},
                                                       "service_latency_ns")
    if hists:
        draws.append(("spectrum", lambda ax: plots.draw_spectrum(ax, hists, slo)))
    if len(r.timeline) >= _MIN_WINDOWS:
        draws.append(("timeline", lambda ax: plots.draw_timeline(ax, r.timeline, slo)))
    if r.batch_sizes:
        draws.append(("batch sizes", lambda ax: plots.draw_batch_sizes(ax, r.batch_sizes)))
    if r.components_ns:
        draws.append(("components", lambda ax: plots.draw_components(ax, r.components_ns)))
    return draws


def _load_draws(points: list[Any], slo: float | None, xlabel: str, offered: bool,
                knee: float | None = None) -> list[tuple[str, Any]]:
    from loadgen.report import plots

    return [("latency against load",
             lambda ax: plots.draw_latency_vs_load(ax, points, slo, xlabel, knee)),
            ("goodput against load", lambda ax: plots.draw_goodput(ax, points, xlabel, offered))]


def _draws(kind: str, doc: Any, root: Path) -> list[tuple[str, Any]]:
    """(title, draw) for every plot the document supports."""
    from loadgen.report import plots

    if kind == "run":
        return _run_draws(doc, root)
    slo = _slo_ns(doc["settings"] if kind == "find-peak" else doc["points"][0]["settings"])
    if kind == "find-peak":
        draws = _load_draws(_search_points(doc), slo, "offered load (QPS)", True,
                            doc["peak_qps"] or None)
        ends = {"peak" if i == 0 else "lowest failing": q for i, q in enumerate(doc["bracket"])}
        chosen = {}
        for label, qps in ends.items():
            probe = next((p for p in doc["probes"] if p["target_qps"] == qps), None)
            if probe is not None:
                chosen[f"{label} {qps:g} QPS"] = read_result(root / probe["dir"])
        hists = _hists(chosen)
        peak = next(iter(chosen.values()), None)
    else:
        axis = _sweep_axis(doc)
        draws = _load_draws(_sweep_points(doc), slo, axis, axis == "target_qps")
        step = max(1, -(-len(doc["points"]) // _MAX_SPECTRA))
        chosen = {", ".join(f"{k}={v}" for k, v in p["values"].items()):
                  read_result(root / p["launch_dirs"][0]) for p in doc["points"][::step]}
        hists = _hists(chosen)
        peak = None
    if hists:
        draws.append(("spectrum", lambda ax: plots.draw_spectrum(ax, hists, slo)))
    if peak is not None:
        draws += [d for d in _run_draws(peak, root) if d[0] != "spectrum"]
    return draws


def _summary(kind: str, doc: Any) -> tuple[str, str]:
    """(what goes above the plots, what goes below them)."""
    if kind == "run":
        r, v = doc.stats, doc.verdict
        figures = {"valid": v.valid, "queries": r.queries, "errors": r.errors,
                   "duration_s": r.duration_s, "qps_scheduled": r.qps_scheduled,
                   "qps_completed": r.qps_completed, "goodput_qps": r.goodput_qps,
                   "samples_per_s": r.samples_per_s,
                   **{f"{k} (ms)": getattr(r.query_latency_ns, k) / 1e6
                      for k in ("p50", "p90", "p99", "p999", "mean")}}
        parts = [_table([figures], list(figures))]
        tokens = token_rows(doc)
        if tokens:
            ts = r.token_stats
            assert ts is not None
            counts = {"output tokens/s": ts.tokens.output_per_s,
                      "input tokens/s": ts.tokens.input_per_s,
                      "streams": ts.tokens.requests, "failed": ts.tokens.failed,
                      "attainment": ts.goodput.attainment,
                      "goodput tokens/s": ts.goodput.tokens_per_s}
            parts += ["<h2>Tokens</h2>", _table([counts], list(counts)),
                      _table(tokens, TOKEN_COLUMNS)]
        parts += [f'<p class="bad">[{x.code}] {html.escape(x.text)}</p>' for x in v.reasons]
        parts += [f'<p class="warn">{html.escape(x)}</p>' for x in v.warnings]
        errors = [{"kind": k, "count": d.count, "messages": " | ".join(d.messages)}
                  for k, d in r.errors_detail.items()]
        below = "<h2>Errors</h2>" + _table(errors, ["kind", "count", "messages"]) if errors else ""
        return "".join(parts), below
    from loadgen.report import tables

    if kind == "find-peak":
        rows = tables.search_rows(doc)
        head = {"peak_qps": doc["peak_qps"], "bracket": doc["bracket"],
                "confidence": doc["confidence"], "status": doc["status"],
                "probes": len(doc["probes"]), "elapsed_s": doc["elapsed_s"]}
        return _table([head], list(head)), "<h2>Probes</h2>" + _table(
            rows, [c for c in rows[0] if c != "dir"] if rows else [])
    rows = tables.sweep_rows(doc)
    keep = [c for c in (rows[0] if rows else {}) if not c.endswith(("_min", "_max"))]
    return "", ("<h2>Points</h2>" + _table(rows, keep)
                + "<p>min and max of each metric are in sweep.csv</p>")


def _headline(kind: str, doc: Any) -> list[str]:
    if kind == "run":
        return [run_headline(doc)]
    if kind == "find-peak":
        return [peak_headline(doc)]
    return [point_headline(p) for p in doc["points"]]


def build_report(path: Path) -> Path:
    """Write DIR/report.html for a run, sweep or find-peak directory; return its path."""
    from loadgen.report import plots

    root = path if path.is_dir() else path.parent
    kind, doc = load_kind(root)
    lines = _headline(kind, doc)
    body = [f"<h1>{html.escape(lines[0])}</h1>"]
    body += [f"<p>{html.escape(line)}</p>" for line in lines[1:]]
    body.append(f"<p>{html.escape(kind)} report of <code>{html.escape(str(root))}</code></p>")
    above, below = _summary(kind, doc)
    body.append(above)
    body.append('<div class="plots">')
    for title, draw in _draws(kind, doc, root):
        body.append(f"<section><h2>{html.escape(title.capitalize())}</h2>"
                    f"{_img(plots.png(draw), title)}</section>")
    body.append("</div>")
    body.append(below)
    page = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(lines[0])}</title><style>{_CSS}</style></head>"
            f"<body>{''.join(body)}</body></html>\n")
    out = root / REPORT_FILE
    out.write_text(page)
    return out


def report_png(path: Path, out: Path, limit: int = 6) -> Path:
    """The first `limit` plots of a report composed into one PNG (for a README)."""
    from loadgen.report import plots

    root = path if path.is_dir() else path.parent
    kind, doc = load_kind(root)
    draws = [d for _, d in _draws(kind, doc, root)][:limit]
    columns = 3 if len(draws) > 4 else 2
    out.write_bytes(plots.compose(draws, _headline(kind, doc)[0], columns))
    return out
