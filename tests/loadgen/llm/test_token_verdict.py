"""MLPerf token mode: a Server run is VALID only if p99 TTFT and p99 TPOT meet their bounds
and early stopping passes on each; hand-computed counts at p99 (459 requests with none over
pass, 458 do not; 10,000 requests may have 77 over, not 78)."""

import pytest

from loadgen.adapters.tokens import TokenStream
from loadgen.judge.stats import summarize
from loadgen.judge.verdict import ReasonCode, evaluate, headline
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import settings_from_mapping
from loadgen.record.collect import Collector
from loadgen.record.tally import RunTimes
from loadgen.record.tokens import TokenRecorder

US = 1_000
TOKEN_MODE = {"scenario": "Server", "preset": "dev", "min_duration_s": 0.0, "target_qps": 10.0,
              "min_query_count": 1, "use_token_latencies": True, "ttft_latency_ms": 1.0,
              "tpot_latency_ms": 0.1}


def _run(n: int, ttft_over: int = 0, tpot_over: int = 0, **settings: object) -> RunPlan:
    plan = RunPlan.of(settings_from_mapping(TOKEN_MODE | settings))
    c = Collector(plan.slo_bound_ns, tokens=TokenRecorder(plan.goodput_slos, plan.token_targets))
    for q in range(n):
        ttft = 2_000 * US if q < ttft_over else 500 * US
        gap = 200 * US if q < tpot_over else 50 * US
        stream = TokenStream()
        stream.add(ttft, 1)
        stream.add(ttft + gap, 1)
        c.issued_query(q, 0, 0, 1, True)
        c.streamed(q, ttft + gap, stream)
    end = 10**9
    stats = summarize(plan, c.tally(RunTimes(0, 0, end, end, False, 0)))
    return plan, stats


def _codes(n: int, ttft_over: int = 0, tpot_over: int = 0) -> tuple[ReasonCode, ...]:
    plan, stats = _run(n, ttft_over, tpot_over)
    return evaluate(plan, stats).codes


@pytest.mark.parametrize(("n", "ttft_over", "tpot_over", "codes"), [
    (459, 0, 0, ()),
    (458, 0, 0, (ReasonCode.TTFT_EARLY_STOPPING, ReasonCode.TPOT_EARLY_STOPPING)),
    (10_000, 77, 77, ()),
    (10_000, 78, 0, (ReasonCode.TTFT_EARLY_STOPPING,)),
    (10_000, 0, 78, (ReasonCode.TPOT_EARLY_STOPPING,)),
    (10_000, 150, 0, (ReasonCode.TTFT_LATENCY,)),  # p99 itself over the bound
    (10_000, 150, 150, (ReasonCode.TTFT_LATENCY, ReasonCode.TPOT_LATENCY)),
])
def test_token_mode_validity(n: int, ttft_over: int, tpot_over: int,
                             codes: tuple[ReasonCode, ...]) -> None:
    assert _codes(n, ttft_over, tpot_over) == codes


def test_reasons_say_what_to_do() -> None:
    plan, stats = _run(10_000, 150, 78)
    reasons = {r.code: r.text for r in evaluate(plan, stats).reasons}
    assert "p99 TTFT 2.00" in reasons[ReasonCode.TTFT_LATENCY]
    assert "lower target_qps" in reasons[ReasonCode.TTFT_LATENCY]
    assert "78 of 10000 requests had TPOT" in reasons[ReasonCode.TPOT_EARLY_STOPPING]
    assert "allows 77" in reasons[ReasonCode.TPOT_EARLY_STOPPING]
    assert stats.token_stats is not None
    es = stats.token_stats.early_stopping
    assert (es["ttft"].requests, es["ttft"].overlatency, es["ttft"].passes) == (10_000, 150, False)


def test_query_latency_is_not_judged_in_token_mode() -> None:
    plan, stats = _run(500)
    assert stats.early_stopping.passes is not None  # figures kept, not a reason
    assert evaluate(plan, stats).valid


def test_a_token_run_without_tokens_is_invalid() -> None:
    plan = RunPlan.of(settings_from_mapping(TOKEN_MODE))
    c = Collector(plan.slo_bound_ns)
    c.issued_query(0, 0, 0, 1, True)
    c.done(0, 100)
    stats = summarize(plan, c.tally(RunTimes(0, 0, 10**9, 10**9, False, 0)))
    verdict = evaluate(plan, stats)
    assert ReasonCode.TTFT_LATENCY in verdict.codes
    assert "streamed no tokens" in verdict.reasons[-1].text


def test_offline_headline_is_tokens_per_second() -> None:
    plan = RunPlan.of(settings_from_mapping({"scenario": "Offline", "input_tokens": 8}))
    c = Collector(plan.slo_bound_ns)
    c.issued_query(0, 0, 0, 2, True)
    for t in (1000, 2000):
        s = TokenStream()
        s.add(t, 5)
        c.sample_streamed(0, s)
    c.done(0, 2000, sample_done_ns=[1000, 2000])
    stats = summarize(plan, c.tally(RunTimes(0, 0, 10**9, 10**9, False, 0)))
    h = headline(plan, stats)
    assert h.name == "tokens_per_s" and h.value == pytest.approx(10 / stats.duration_s)


def test_fixed_output_cut_short_is_warned() -> None:
    plan = RunPlan.of(settings_from_mapping({"scenario": "Offline", "input_tokens": 8,
                                            "fixed_output": True}))
    c = Collector(plan.slo_bound_ns)
    c.issued_query(0, 0, 0, 1, True)
    s = TokenStream()
    s.add(100, 3)
    s.finish_reason = "stop"
    c.streamed(0, 100, s)
    stats = summarize(plan, c.tally(RunTimes(0, 0, 10**9, 10**9, False, 0)))
    assert any("another reason than `length`" in w for w in evaluate(plan, stats).warnings)
