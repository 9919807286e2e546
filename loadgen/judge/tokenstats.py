"""A token run's figures: TTFT, TTFO, E2E, TPOT, ITL and the rest, token counts, goodput.

Pure: (plan, token tally, measured duration) -> TokenStats. `as_dict` gives
result.json's top-level keys (`ttft_ns`, `ttfo_ns`, `tpot_ns`, `itl_ns`,
`e2e_ns`, `chunk_gap_ns`, `normalized_latency_ns`, `longest_stall_ns`,
`tokens`, `goodput`, `token_early_stopping`); `from_dict` reads them back.
Latencies timed from the schedule carry their `from_send` view beside them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from loadgen.judge import early_stopping
from loadgen.judge.adjusted import adjusted_percentiles, error_adjusted
from loadgen.plan.plan import RunPlan
from loadgen.plan.tokenizers.load import describe_tokenizer
from loadgen.record.histograms import encode, percentile_ns, summary_ns
from loadgen.record.tokens import TokenTally
from loadgen.record.turns import TURN_METRICS

__all__ = ["HISTOGRAM_KEYS", "Goodput", "TokenCounts", "TokenEarlyStopping", "TokenStats",
           "ViewedSummary", "cache_block", "summarize_tokens"]

HISTOGRAM_KEYS = ("ttft_ns", "tpot_ns", "itl_ns", "e2e_ns")
_SUMMARY_KEYS = ("p50", "p90", "p95", "p99", "p999", "mean", "min", "max", "count")
_ADJUSTED = "_error_adjusted"


@dataclass(frozen=True, slots=True)
class ViewedSummary:
    """One latency's summary (ns, from the scheduled time) and, where it applies, from the send."""

    summary: dict[str, int]
    from_send: dict[str, int] | None = None
    error_adjusted: dict[str, int | None] | None = None
    """TTFT, TTFO, E2E and TPOT: p50, p90, p99 (and the SLO's percentile) with failed and
    unfinished requests counted as infinite (None) or at the timeout (`judge.adjusted`)."""

    def as_dict(self) -> dict[str, Any]:
        """p50 p90 p95 p99 p999 mean min max count, `p99_error_adjusted` and the like where
        computed, plus `from_send` where it applies."""
        out: dict[str, Any] = dict(self.summary)
        for key, value in (self.error_adjusted or {}).items():
            out[f"{key}{_ADJUSTED}"] = value
        if self.from_send is not None:
            out["from_send"] = dict(self.from_send)
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ViewedSummary:
        """Read back `as_dict`."""
        send = doc.get("from_send")
        adjusted = {k.removesuffix(_ADJUSTED): v for k, v in doc.items()
                    if k.endswith(_ADJUSTED)}
        return cls({k: int(doc.get(k, 0)) for k in _SUMMARY_KEYS},
                   None if send is None else {k: int(send.get(k, 0)) for k in _SUMMARY_KEYS},
                   adjusted or None)


@dataclass(frozen=True, slots=True)
class TokenCounts:
    """Input and output tokens: totals, per-request summaries, rates, client/server check."""

    requests: int  # measured streams that finished well
    finish_other: int  # of them, with a finish_reason other than `length`
    failed: int  # measured queries that failed (partial: of them, with tokens delivered)
    partial: int
    no_output: int
    input_total: int
    input_known: int  # requests whose input length is known (usage, else the workload's)
    output_total: int
    input: dict[str, int]  # per-request summary (tokens)
    output: dict[str, int]
    input_per_s: float
    output_per_s: float
    output_per_s_per_request: dict[str, float]  # per-request summary (tokens/s)
    discrepancy: dict[str, Any]  # client count vs the server's usage
    cache: dict[str, Any] = dataclasses.field(default_factory=lambda: cache_block({}))
    """Prefix-cache hits from `usage.prompt_tokens_details.cached_tokens`: `cached_tokens_total`,
    `requests_reporting`, `prompt_tokens_reporting` and `hit_rate` {`requested` (None until
    a workload sets one), `achieved` (cached / prompt tokens of the reporting requests; None
    when none reported)}."""
    reasoning: dict[str, int] = dataclasses.field(default_factory=dict)
    """`reasoning_tokens_total` and `requests_reporting` (`completion_tokens_details`)."""
    tokenizer: dict[str, str] | None = None
    """Which tokenizer counted the client's token counts (`describe_tokenizer`: `name`,
    `kind`); None in an older result."""

    def as_dict(self) -> dict[str, Any]:
        """result.json's `tokens`."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> TokenCounts:
        """Read back `as_dict` (an older result without `cache` or `reasoning` reads as none
        reported)."""
        defaults: dict[str, Any] = {"cache": cache_block({}), "reasoning": {}, "tokenizer": None}
        return cls(**{f.name: doc.get(f.name, defaults.get(f.name, 0))
                      for f in dataclasses.fields(cls)})


def cache_block(c: dict[str, int], requested: float | None = None) -> dict[str, Any]:
    """`tokens.cache` from the token counters (`cached_*`)."""
    known, prompt = c.get("cached_known", 0), c.get("cached_input_total", 0)
    return {"cached_tokens_total": c.get("cached_total", 0), "requests_reporting": known,
            "prompt_tokens_reporting": prompt,
            "hit_rate": {"requested": requested,
                         "achieved": c.get("cached_total", 0) / prompt if known and prompt
                         else None}}


@dataclass(frozen=True, slots=True)
class Goodput:
    """Requests meeting every goodput SLO set; errors count as misses."""

    slos_ms: dict[str, float]
    good: int
    attempted: int  # finished plus failed (measured)
    attainment: float  # good / attempted (1.0 with nothing attempted)
    requests_per_s: float
    tokens_per_s: float  # output tokens of good requests per second

    def as_dict(self) -> dict[str, Any]:
        """result.json's `goodput`."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> Goodput:
        """Read back `as_dict`."""
        return cls(**{f.name: doc[f.name] for f in dataclasses.fields(cls)})


@dataclass(frozen=True, slots=True)
class TokenEarlyStopping:
    """MLPerf early stopping on one token latency: requests over the target, and the bound."""

    metric: str  # "ttft" or "tpot"
    percentile: float
    target_ns: int
    requests: int
    overlatency: int
    max_overlatency_allowed: int
    min_queries_needed: int
    p_ns: int  # the metric at `percentile`
    passes: bool

    def as_dict(self) -> dict[str, Any]:
        """Plain values."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> TokenEarlyStopping:
        """Read back `as_dict`."""
        return cls(**{f.name: doc[f.name] for f in dataclasses.fields(cls)})


_LATENCIES = {  # result.json key: (histogram from the schedule, from the send or None)
    "ttft_ns": ("ttft_ns", "ttft_sent_ns"),
    "ttfo_ns": ("ttfo_ns", "ttfo_sent_ns"),
    "e2e_ns": ("e2e_ns", "e2e_sent_ns"),
    "tpot_ns": ("tpot_ns", None),
    "itl_ns": ("itl_ns", None),
    "chunk_gap_ns": ("chunk_gap_ns", None),
    "normalized_latency_ns": ("normalized_ns", None),
    "longest_stall_ns": ("stall_ns", None),
}


@dataclass(frozen=True, slots=True)
class TokenStats:
    """Everything the verdict and reports read about a token run."""

    latencies: dict[str, ViewedSummary]  # keyed as `_LATENCIES`
    tokens: TokenCounts
    goodput: Goodput
    early_stopping: dict[str, TokenEarlyStopping]  # "ttft", "tpot" where a target is set
    histograms: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)
    """`HISTOGRAM_KEYS` as HDR V2 text (from the schedule), for compare and re-reading."""
    turns: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """Multi-turn sessions, by turn index ("1", "2", ...): `count` (finished streams of that
    turn) and the `ttft_ns` and `tpot_ns` summaries, each from its turn's own schedule."""

    def latency(self, key: str) -> ViewedSummary:
        """One latency by its result.json key (`ttft_ns`, `tpot_ns`, ...)."""
        return self.latencies[key]

    def as_dict(self) -> dict[str, Any]:
        """result.json's token keys."""
        out: dict[str, Any] = {k: v.as_dict() for k, v in self.latencies.items()}
        out["tokens"] = self.tokens.as_dict()
        out["goodput"] = self.goodput.as_dict()
        out["token_early_stopping"] = {k: v.as_dict() for k, v in self.early_stopping.items()}
        out["token_histograms"] = dict(self.histograms)
        if self.turns:
            out["turns"] = self.turns
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> TokenStats | None:
        """Read the token keys of a result.json; None when it has none."""
        if "ttft_ns" not in doc or "tokens" not in doc:
            return None
        return cls({k: ViewedSummary.from_dict(doc.get(k, {})) for k in _LATENCIES},
                   TokenCounts.from_dict(doc["tokens"]), Goodput.from_dict(doc["goodput"]),
                   {k: TokenEarlyStopping.from_dict(v)
                    for k, v in doc.get("token_early_stopping", {}).items()},
                   dict(doc.get("token_histograms", {})), dict(doc.get("turns", {})))


def _failed_for(key: str, c: dict[str, int], unfinished: int) -> int | None:
    """Requests missing from one latency's histogram because they failed or never ended (a
    part-way failure has its TTFT); None for the latencies not adjusted (per token)."""
    if key in ("ttft_ns", "ttfo_ns"):
        return c["failed"] - c["partial"] + unfinished
    if key in ("e2e_ns", "tpot_ns"):
        return c["failed"] + unfinished
    return None


def summarize_tokens(plan: RunPlan, t: TokenTally, duration_s: float,
                     unfinished: int = 0, tokenizer: str | None = None) -> TokenStats:
    """Reduce a token tally to the figures of record (`unfinished`: queries still running
    at the end, counted in the error-adjusted tails; `tokenizer`: the one that counted,
    where the SUT named its own, else the plan's)."""
    h, c = t.histograms, t.counters
    per_s = (lambda n: n / duration_s) if duration_s > 0 else (lambda n: 0.0)
    percentiles = adjusted_percentiles(plan.settings.target_latency_percentile)
    cap = plan.query_timeout_ns or None

    def adjusted(key: str, main: str) -> dict[str, int | None] | None:
        failed = _failed_for(key, c, unfinished)
        return None if failed is None else error_adjusted(h[main], failed, percentiles, cap)

    latencies = {key: ViewedSummary(summary_ns(h[main]),
                                    None if send is None else summary_ns(h[send]),
                                    adjusted(key, main))
                 for key, (main, send) in _LATENCIES.items()}
    rate = summary_ns(h["output_mtok_per_s"])
    compared = c["compared"]
    counts = TokenCounts(
        requests=c["streams"], finish_other=c["finish_other"], failed=c["failed"], partial=c["partial"],
        no_output=c["no_output"], input_total=c["input_total"], input_known=c["input_known"],
        output_total=c["output_total"], input=summary_ns(h["input_tokens"]),
        output=summary_ns(h["output_tokens"]), input_per_s=per_s(c["input_total"]),
        output_per_s=per_s(c["output_total"]),
        output_per_s_per_request={k: v if k == "count" else v / 1000 for k, v in rate.items()},
        discrepancy={"compared": compared, "client_total": c["client_total"],
                     "server_total": c["server_total"], "mismatched": c["mismatched"],
                     "abs_diff_total": c["abs_diff_total"],
                     "relative": c["abs_diff_total"] / c["server_total"]
                     if c["server_total"] else 0.0},
        cache=cache_block(c, plan.cache_hit_requested),
        reasoning={"reasoning_tokens_total": c["reasoning_total"],
                   "requests_reporting": c["reasoning_known"]},
        tokenizer=describe_tokenizer(tokenizer or plan.settings.tokenizer))
    attempted = c["streams"] + c["failed"]
    goodput = Goodput(plan.goodput_slos.as_dict(), c["good"], attempted,
                      c["good"] / attempted if attempted else 1.0, per_s(c["good"]),
                      per_s(c["good_tokens"]))
    blobs = {k: encode(h[k]) for k in HISTOGRAM_KEYS if h[k].total_count}
    turns = {str(turn): {"count": int(hists["ttft_ns"].total_count),
                         **{k: summary_ns(hists[k]) for k in TURN_METRICS}}
             for turn, hists in sorted(t.turns.items())}
    return TokenStats(latencies, counts, goodput, _early_stopping(plan, t), blobs, turns)


def _early_stopping(plan: RunPlan, t: TokenTally) -> dict[str, TokenEarlyStopping]:
    """Early stopping on TTFT and on TPOT, each against its MLPerf target where set."""
    out = {}
    p = plan.settings.target_latency_percentile
    targets = plan.token_targets
    c = t.counters
    for metric, target, n, k in (("ttft", targets.ttft_ns, c["ttft_requests"], c["ttft_over"]),
                                 ("tpot", targets.tpot_ns, c["tpot_requests"], c["tpot_over"])):
        if not target:
            continue
        out[metric] = TokenEarlyStopping(
            metric=metric, percentile=p, target_ns=target, requests=n, overlatency=k,
            max_overlatency_allowed=early_stopping.max_overlatency(n, p),
            min_queries_needed=early_stopping.min_queries(p, k),
            p_ns=int(percentile_ns(t.histograms[f"{metric}_ns"], p)) if n else 0,
            passes=early_stopping.passes(n, k, p))
    return out

