"""report.html: one self-contained, interactive page rebuilt from the saved files of a run
directory (result.json), a sweep (sweep.json), a find-peak search (peak.json) or a
comparison (compare.json, `loadgen.report.comparison`). Reads
files only: no clock, no network, so old runs re-render; the page itself loads nothing
(the Plotly library is inlined once, the charts are JSON beside it), so it works offline.

At the top: the verdict, the headline sentence, each reason and warning (a sweep's noisy
points name their noisy metric). Charts (`loadgen.report.charts`): latency percentiles
over time with the SLO line, throughput and goodput over time, errors over time (from
result.json `timeline`); the percentile spectrum and the issue lag's, on the 1/(1-p)
axis; component shares and batch sizes (when the SUT reports them); token latencies
(LLM runs: `ttft_ns`, `tpot_ns`, `itl_ns`, `e2e_ns`...); TTFT and TPOT by turn, with a
table of them (multi-turn sessions, result.json `turns`, `loadgen.report.turns`); latency and goodput against
load with the knee (sweeps and searches), and a search's peak run's own charts.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path
from typing import Any

from loadgen.adapters.safetext import safe_tree
from loadgen.errors import ResultError
from loadgen.record.histograms import decode
from loadgen.report import charts, comparison, tables
from loadgen.report.charts import Chart, LoadPoint
from loadgen.report.energy import energy_html
from loadgen.report.headline import noisy_flag, peak_headline, point_headline, run_headline
from loadgen.report.jobsummary import job_row
from loadgen.report.overview import peak_table, sweep_table
from loadgen.report.pareto import PARETO_FILE, pareto_chart, pareto_rows
from loadgen.report.result import RESULT_FILE, RunResult, read_result
from loadgen.report.serverchart import server_chart
from loadgen.report.tokensummary import TOKEN_COLUMNS, token_rows
from loadgen.report.turns import TURN_COLUMNS, turn_rows

__all__ = ["REPORT_FILE", "TOKEN_METRICS", "build_report", "load_kind"]

REPORT_FILE = "report.html"
_MAX_SPECTRA = 6
_MIN_WINDOWS = 2  # a timeline of fewer windows says nothing
TOKEN_METRICS = ("ttft_ns", "ttfo_ns", "tpot_ns", "itl_ns", "e2e_ns")
"""result.json's token latencies (LLM runs), charted when present."""
_PLOT_CONFIG = {"displaylogo": False, "responsive": True}

_CSS = """body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em}table{border-collapse:collapse;
font-size:.85em;display:block;overflow-x:auto}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}
th{background:#f3f3f3}td.l,th.l{text-align:left}.bad{color:#b00}.warn{color:#a60}
.chart{height:380px}.verdict{font-weight:bold;padding:.2em .6em;border-radius:4px;color:#fff}
.VALID{background:#2a7d2a}.INVALID{background:#b00}
.plots{display:grid;grid-template-columns:repeat(auto-fit,minmax(520px,1fr));gap:0 1.5em}"""


def load_kind(path: Path) -> tuple[str, Any]:
    """('find-peak' | 'sweep' | 'comparison', document) or ('run', RunResult) for a
    directory (or a file in one)."""
    root = path if path.is_dir() else path.parent
    for name, kind in (("peak.json", "find-peak"), ("sweep.json", "sweep"),
                       ("compare.json", "comparison")):
        if (root / name).is_file():
            try:
                return kind, safe_tree(json.loads((root / name).read_text()))
            except (OSError, ValueError) as exc:
                raise ResultError(f"{root / name}: cannot read: {exc}") from None
    return "run", read_result(root)


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
    """Each result's histogram `key` by label, where it holds a spectrum (2 values or more:
    an Offline run's single query has none)."""
    hists = {label: decode(r.stats.histograms[key]) for label, r in results.items()
             if key in r.stats.histograms}
    return {label: h for label, h in hists.items() if h.get_total_count() >= 2}


def _search_points(doc: Mapping[str, Any]) -> list[LoadPoint]:
    return [LoadPoint(float(p["target_qps"]), p["latency_ns"], float(p["qps_completed"]),
                      float(p["goodput_qps"]), bool(p["valid"])) for p in doc["probes"]]


def _sweep_axis(doc: Mapping[str, Any]) -> str:
    grid = doc["grid"]
    numeric = [k for k, vs in grid.items() if all(isinstance(v, int | float) for v in vs)]
    return "target_qps" if "target_qps" in grid else (numeric or list(grid))[0]


def _sweep_points(doc: Mapping[str, Any]) -> list[LoadPoint]:
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


def _raw_result(root: Path) -> dict[str, Any]:
    """result.json as plain JSON (for fields newer than `RunResult`); {} when unreadable."""
    try:
        doc = safe_tree(json.loads((root / RESULT_FILE).read_text()))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _token_metrics(root: Path) -> dict[str, Any]:
    """The token latencies result.json holds (LLM runs), by name."""
    doc = _raw_result(root)
    return {k: doc[k] for k in TOKEN_METRICS if isinstance(doc.get(k), dict)}


def _comparison_slo(doc: Mapping[str, Any]) -> float | None:
    paths = doc.get("a_results") or []
    return _slo_ns(read_result(Path(paths[0])).settings.as_dict()) if paths else None


def _run_charts(result: RunResult, root: Path) -> list[Chart]:
    r = result.stats
    slo = _slo_ns(result.settings.as_dict())
    out: list[Chart] = []
    if len(r.timeline) >= _MIN_WINDOWS:
        end_s = float(result.settings.warmup_s) + r.duration_s
        out += [charts.latency_timeline_chart(r.timeline, slo),
                charts.throughput_chart(r.timeline, end_s)]
        if any(int(w.get("errors", 0)) for w in r.timeline):
            out.append(charts.errors_chart(r.timeline))
    hists = _hists({"from schedule": result}) | _hists({"service, from send": result},
                                                       "service_latency_ns")
    hists = hists or _hists({"samples, from schedule": result}, "latency_ns")  # Offline
    if hists:
        out.append(charts.spectrum_chart(hists, slo))
    lag = _hists({"issue lag": result}, "issue_lag_ns")
    if lag:
        limit = float(result.settings.max_issue_lag_ms) * 1e6 or None
        out.append(charts.spectrum_chart(lag, limit, "Issue lag by percentile", "limit"))
    tokens = _token_metrics(root)
    if tokens:
        out.append(charts.token_chart(tokens))
        token_hists = r.token_stats.histograms if r.token_stats is not None else {}
        for name in (k for k in tokens if k in token_hists):
            label = name.removesuffix("_ns").upper()
            h = decode(token_hists[name])
            if h.get_total_count() >= 2:
                out.append(charts.spectrum_chart({label: h}, None, f"{label} by percentile"))
    if r.token_stats is not None and r.token_stats.turns:
        out.append(charts.turns_chart(turn_rows(r.token_stats.turns)))
    server = result.server_metrics
    if server is not None and (chart := server_chart(server.series, r.timeline)) is not None:
        out.append(chart)
    if r.components_ns:
        out.append(charts.components_chart(r.components_ns))
    if r.batch_sizes:
        out.append(charts.batch_sizes_chart(r.batch_sizes))
    return out


def _load_charts(points: list[LoadPoint], slo: float | None, xlabel: str, offered: bool,
                 knee: float | None = None) -> list[Chart]:
    return [charts.latency_vs_load_chart(points, slo, xlabel, knee),
            charts.goodput_vs_load_chart(points, xlabel, offered)]


def _charts(kind: str, doc: Any, root: Path) -> list[Chart]:
    """Every chart the document supports."""
    if kind == "run":
        return _run_charts(doc, root)
    if kind == "comparison":
        return comparison.comparison_charts(doc, _comparison_slo(doc))
    slo = _slo_ns(doc["settings"] if kind == "find-peak" else doc["points"][0]["settings"])
    if kind == "find-peak":
        out = _load_charts(_search_points(doc), slo, "offered load (QPS)", True,
                           doc["peak_qps"] or None)
        ends = {"peak" if i == 0 else "lowest failing": q for i, q in enumerate(doc["bracket"])}
        chosen = {}
        for label, qps in ends.items():
            probe = next((p for p in doc["probes"] if p["target_qps"] == qps), None)
            if probe is not None:
                chosen[f"{label} {qps:g} QPS"] = (read_result(root / probe["dir"]),
                                                 root / probe["dir"])
        hists = _hists({k: v[0] for k, v in chosen.items()})
        peak = next(iter(chosen.items()), None)
    else:
        axis = _sweep_axis(doc)
        out = _load_charts(_sweep_points(doc), slo, axis, axis == "target_qps")
        step = max(1, -(-len(doc["points"]) // _MAX_SPECTRA))
        hists = _hists({", ".join(f"{k}={v}" for k, v in p["values"].items()):
                        read_result(root / p["launch_dirs"][0]) for p in doc["points"][::step]})
        peak = None
    if hists:
        out.append(charts.spectrum_chart(hists, slo))
    if peak is not None:
        label, (result, run_dir) = peak
        out += [replace(c, title=f"{c.title}: {label}") for c in _run_charts(result, run_dir)
                if c.title != "Latency by percentile"]
    return out


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
        adjusted = r.query_latency_ns.error_adjusted or {}
        if r.errors or r.unfinished:  # the tail with failures counted in (None: infinite)
            figures |= {f"{k} error-adjusted (ms)": "inf" if v is None else v / 1e6
                        for k, v in adjusted.items()}
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
            achieved = ts.tokens.cache["hit_rate"]["achieved"]
            if achieved is not None:
                counts["prefix-cache hit rate (usage)"] = achieved
            parts += ["<h2>Tokens</h2>", _table([counts], list(counts)),
                      _table(tokens, TOKEN_COLUMNS)]
            if ts.turns:
                parts += ["<h2>Turns</h2>", _table(turn_rows(ts.turns), TURN_COLUMNS)]
        if r.job_stats is not None:
            jobs = job_row(r.job_stats)
            parts += ["<h2>Jobs</h2>", _table([jobs], list(jobs))]
        parts += [f'<p class="bad">[{x.code}] {html.escape(x.text)}</p>' for x in v.reasons]
        parts += [f'<p class="warn">{html.escape(x)}</p>' for x in v.warnings]
        errors = [{"kind": k, "count": d.count, "messages": " | ".join(d.messages)}
                  for k, d in r.errors_detail.items()]
        below = "<h2>Errors</h2>" + _table(errors, ["kind", "count", "messages"]) if errors else ""
        return "".join(parts), energy_html(doc.energy) + below
    from loadgen.report import tables

    if kind == "comparison":
        rows = comparison.comparison_rows(doc)
        parts = [_table(rows, list(rows[0]) if rows else [])]
        parts += [f'<p class="warn">differs: {html.escape(f"{k}: {a} -> {b}")}</p>'
                  for k, a, b in doc["differences"]]
        if doc["mismatch"]:
            parts.append('<p class="bad">construct mismatch: A and B differ in more than the '
                         'variable compared (name it with --vary)</p>')
        return "".join(parts), ""
    if kind == "find-peak":
        rows = tables.search_rows(doc)
        head = {"peak_qps": doc["peak_qps"], "bracket": doc["bracket"],
                "confidence": doc["confidence"], "status": doc["status"],
                "probes": len(doc["probes"]), "elapsed_s": doc["elapsed_s"]}
        return _glance(peak_table(doc)) + _table([head], list(head)), "<h2>Probes</h2>" + \
            _table(rows, [c for c in rows[0] if c != "dir"] if rows else [])
    rows = tables.sweep_rows(doc)
    keep = [c for c in (rows[0] if rows else {}) if not c.endswith(("_min", "_max"))]
    return _glance(sweep_table(doc)), ("<h2>Points</h2>" + _table(rows, keep)
                                       + "<p>min and max of each metric are in sweep.csv</p>")


def _glance(text: str) -> str:
    """The table the command printed, one row per point, leading the page."""
    return f'<pre class="glance">{html.escape(text)}</pre>'



def _headline(kind: str, doc: Any) -> list[str]:
    if kind == "run":
        return [run_headline(doc)]
    if kind == "find-peak":
        return [peak_headline(doc)]
    if kind == "comparison":
        return [comparison.comparison_headline(doc), f"A: {doc['a']}", f"B: {doc['b']}"]
    return [noisy_flag(p) + point_headline(p) for p in doc["points"]]


def _plotly_js() -> str:
    """The Plotly library the `plotly` package ships (minified, about 4.8 MB)."""
    return (resources.files("plotly") / "package_data" / "plotly.min.js").read_text("utf-8")


def _script_json(value: Any) -> str:
    """JSON safe inside a <script> element."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/")


def _verdict(kind: str, doc: Any) -> str:
    if kind == "run":
        word = "VALID" if doc.valid else "INVALID"
    elif kind == "find-peak":
        word = "VALID" if doc["peak_qps"] else "INVALID"
    else:
        return ""
    return f'<span class="verdict {word}">{word}</span> '


def _pareto(kind: str, doc: Any, root: Path) -> list[Chart]:
    """A token sweep's or find-peak's Pareto chart, its points written to pareto.csv."""
    if kind not in ("sweep", "find-peak"):
        return []
    rows = pareto_rows(kind, doc, root)
    if not rows:
        return []
    tables.write_csv(root / PARETO_FILE, rows)
    return [pareto_chart(rows)]


def build_report(path: Path) -> Path:
    """Write DIR/report.html for a run, sweep, find-peak or comparison directory; return
    its path; ResultError for a path that is not there."""
    if not path.exists():
        raise ResultError(f"{path}: no such run, sweep, find-peak or comparison directory")
    root = path if path.is_dir() else path.parent
    kind, doc = load_kind(root)
    lines = _headline(kind, doc)
    body = [f"<h1>{_verdict(kind, doc)}{html.escape(lines[0])}</h1>"]
    body += [f"<p>{html.escape(line)}</p>" for line in lines[1:]]
    body.append(f"<p>{html.escape(kind)} report of <code>{html.escape(str(root))}</code>. "
                "Hover a chart for values, drag to zoom (double-click to reset), click a "
                "legend entry to hide or show its series.</p>")
    above, below = _summary(kind, doc)
    body.append(above)
    body.append('<div class="plots">')
    figures = []
    for i, chart in enumerate([*_charts(kind, doc, root), *_pareto(kind, doc, root)]):
        body.append(f'<section><h2>{html.escape(chart.title)}</h2>'
                    f'<div class="chart" id="chart{i}"></div></section>')
        figures.append({"id": f"chart{i}", "data": chart.data, "layout": chart.layout})
    body.append("</div>")
    body.append(below)
    draw = (f"const FIGURES={_script_json(figures)},CONFIG={_script_json(_PLOT_CONFIG)};"
            "for(const f of FIGURES){Plotly.newPlot(f.id,f.data,f.layout,CONFIG);}")
    page = (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(lines[0])}</title><style>{_CSS}</style>"
            f"<script>{_plotly_js()}</script></head>"
            f"<body>{''.join(body)}<script>{draw}</script></body></html>\n")
    out = root / REPORT_FILE
    out.write_text(page)
    return out
