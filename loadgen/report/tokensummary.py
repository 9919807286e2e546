"""The token lines of summary.txt: latencies, counts, MLPerf token mode and goodput.

Reads a `RunResult` only; empty for a run without token streams.
"""

from __future__ import annotations

from loadgen.judge.tokenstats import TokenStats, ViewedSummary
from loadgen.report.result import RunResult

__all__ = ["TOKEN_COLUMNS", "token_lines", "token_rows"]

TOKEN_COLUMNS = ("metric", "n", "p50 (ms)", "p90 (ms)", "p99 (ms)", "mean (ms)", "max (ms)",
                 "p99 from send (ms)", "p99 error-adjusted (ms)")
"""The columns of `token_rows` (a row without a send view leaves the last empty)."""
_ROWS = (("TTFT", "ttft_ns"), ("TTFO", "ttfo_ns"), ("E2E", "e2e_ns"), ("TPOT", "tpot_ns"),
         ("ITL", "itl_ns"), ("chunk gap", "chunk_gap_ns"), ("E2E/token", "normalized_latency_ns"),
         ("stall", "longest_stall_ns"))


def _row(name: str, v: ViewedSummary) -> str:
    s = v.summary
    cells = "".join(f"{s[k] / 1e6:10.3f}" for k in ("p50", "p90", "p99", "mean", "max"))
    line = f"  {name:<10}{cells}  n={s['count']}"
    if v.from_send is not None and v.from_send["count"]:
        line += (f"   from send p50 {v.from_send['p50'] / 1e6:.3f} "
                 f"p99 {v.from_send['p99'] / 1e6:.3f}")
    return line


def _latency_lines(ts: TokenStats) -> list[str]:
    lines = ["", ("Token latencies (ms, from schedule)     p50       p90       p99      mean"
                 "       max")]
    for name, key in _ROWS:
        v = ts.latencies[key]
        if v.summary["count"]:
            lines.append(_row(name, v))
            if v.error_adjusted and v.error_adjusted != {k: v.summary[k]
                                                         for k in v.error_adjusted}:
                cells = "  ".join(f"{k} {'inf' if x is None else f'{x / 1e6:.3f}'}"
                                  for k, x in v.error_adjusted.items())
                lines.append(f"    error-adjusted (failed as infinite): {cells}")
    return lines


def _count_lines(ts: TokenStats) -> list[str]:
    t = ts.tokens
    mean_in = t.input_total / t.input_known if t.input_known else 0.0
    mean_out = t.output_total / t.requests if t.requests else 0.0
    lines = [(f"Tokens    : input {t.input_total} (mean {mean_in:.1f}), output {t.output_total} "
             f"(mean {mean_out:.1f}); {t.output_per_s:.1f} output tokens/s, "
             f"{t.input_per_s:.1f} input tokens/s"),
             (f"            per request p50 {t.output_per_s_per_request['p50']:.1f} output "
             f"tokens/s; {t.requests} streams, {t.failed} failed ({t.partial} part-way)")]
    if t.tokenizer is not None:
        tok = t.tokenizer
        named = f"{tok['name']} ({tok['kind']})" if "path" in tok else tok["name"]
        lines.append(f"            counted by tokenizer {named}")
    d = t.discrepancy
    if d["compared"]:
        lines.append(f"            client vs server count: {d['compared']} compared, "
                     f"{d['mismatched']} differ, {100 * d['relative']:.2f}% apart in all")
    cache, reasoning = t.cache, t.reasoning
    if cache["requests_reporting"]:
        achieved = cache["hit_rate"]["achieved"] or 0.0
        lines.append(f"            prefix cache: {100 * achieved:.2f}% of prompt tokens cached "
                     f"({cache['cached_tokens_total']} of {cache['prompt_tokens_reporting']}, "
                     f"{cache['requests_reporting']} requests reporting)")
    if reasoning.get("requests_reporting"):
        lines.append(f"            reasoning: {reasoning['reasoning_tokens_total']} tokens "
                     f"({reasoning['requests_reporting']} requests reporting)")
    return lines


def _mode_lines(ts: TokenStats) -> list[str]:
    lines = []
    for metric, es in ts.early_stopping.items():
        held = "meets" if es.p_ns <= es.target_ns else "exceeds"
        if es.max_overlatency_allowed < 0:  # too few requests for any count over the bound
            why = f"needs at least {es.min_queries_needed} requests, has {es.requests}"
        else:
            why = f"{es.overlatency} over, {es.max_overlatency_allowed} allowed"
        lines.append(f"Token mode: p{es.percentile:g} {metric.upper()} {es.p_ns / 1e6:.3f} ms "
                     f"{held} {es.target_ns / 1e6:g} ms; early stop "
                     f"{'passes' if es.passes else 'fails'} ({why})")
    return lines


def _goodput_lines(ts: TokenStats) -> list[str]:
    g = ts.goodput
    if not g.slos_ms:
        return []
    slos = ", ".join(f"{k.upper()} <= {v:g} ms" for k, v in g.slos_ms.items())
    return [(f"Token SLOs: {100 * g.attainment:.2f}% attainment ({g.good} of {g.attempted}, "
            f"errors as misses) under {slos}; token-SLO goodput {g.requests_per_s:.2f} "
            f"requests/s, {g.tokens_per_s:.1f} tokens/s")]


def _turn_lines(ts: TokenStats) -> list[str]:
    """Multi-turn sessions: TTFT and TPOT of each turn, each from its own schedule."""
    if not ts.turns:
        return []
    lines = ["", "Turns (ms, from each turn's schedule)   TTFT p50  TTFT p99  TPOT p50  TPOT p99"]
    for turn, figures in ts.turns.items():
        ttft, tpot = figures["ttft_ns"], figures["tpot_ns"]
        cells = "".join(f"{v / 1e6:10.3f}" for v in (ttft["p50"], ttft["p99"], tpot["p50"],
                                                     tpot["p99"]))
        lines.append(f"  turn {turn:<6}n={figures['count']:<18}{cells}")
    return lines


def token_lines(result: RunResult) -> list[str]:
    """The token section of the summary (no lines without token figures)."""
    ts = result.stats.token_stats
    if ts is None:
        return []
    return (_latency_lines(ts) + _turn_lines(ts) + [""] + _count_lines(ts) + _mode_lines(ts)
            + _goodput_lines(ts))


def token_rows(result: RunResult) -> list[dict[str, object]]:
    """One row per token latency (ms), for the HTML report; none without token figures."""
    ts = result.stats.token_stats
    if ts is None:
        return []
    rows: list[dict[str, object]] = []
    for name, key in _ROWS:
        v = ts.latencies[key]
        if not v.summary["count"]:
            continue
        row: dict[str, object] = {"metric": name, "n": v.summary["count"]}
        row |= {f"{k} (ms)": v.summary[k] / 1e6 for k in ("p50", "p90", "p99", "mean", "max")}
        if v.from_send is not None:
            row["p99 from send (ms)"] = v.from_send["p99"] / 1e6
        adjusted = (v.error_adjusted or {}).get("p99", v.summary["p99"])
        row["p99 error-adjusted (ms)"] = "inf" if adjusted is None else adjusted / 1e6
        rows.append(row)
    return rows
