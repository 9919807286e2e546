"""compare on token runs: TTFT/TPOT percentiles get order-statistic intervals from the token
histograms, token rates Poisson ones; a faster server shows as B lower outside the noise."""

from loadgen.adapters.llmsim import CostModel
from loadgen.api import judge
from loadgen.campaigns.compare import Side, compare, render, token_metric_values
from loadgen.engine.session import SessionOutcome
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import settings_from_mapping
from loadgen.record.tally import RunTimes
from loadgen.report.result import RunResult
from tests.loadgen.llm.virtual import drive

MS, US = 1_000_000, 1_000


def _result(step_base_ns: int) -> RunResult:
    model = CostModel(step_base_ns=step_base_ns, step_per_seq_ns=100 * US,
                      prefill_per_token_ns=10 * US, max_seqs=8)
    c, sut = drive(model, [(i * 20 * MS, 1) for i in range(500)], 100, 8)
    end = 500 * 20 * MS
    plan = RunPlan.of(settings_from_mapping({"scenario": "Server", "target_qps": 50.0,
                                             "use_token_latencies": True,
                                             "ttft_latency_ms": 100.0, "tpot_latency_ms": 20.0,
                                             "preset": "dev"}))
    tally = c.tally(RunTimes(0, 0, end, end, False, 0))
    return judge(plan, SessionOutcome(tally, sut.describe(), None, 0.0))


def test_compare_reads_token_figures() -> None:
    a, b = _result(4 * MS), _result(2 * MS)
    values = token_metric_values(a)
    assert values["tpot_p50_ns"] >= 0.999 * (4 * MS + 100 * US)  # a step of a batch of one
    assert values["attainment"] == 1.0
    c = compare(Side("a", (a,)), Side("b", (b,)))
    by_name = {m.metric: m for m in c.metrics}
    for name in ("ttft_p99_ns", "tpot_p50_ns", "tpot_p99_ns", "itl_p99_ns", "e2e_p99_ns"):
        assert by_name[name].method == "order-statistic"
        assert by_name[name].diff < 0 and not by_name[name].noise, name
    assert by_name["output_tokens_per_s"].method == "poisson"
    assert by_name["attainment"].method == "none"
    assert "tpot_p99 " in render(c)  # text names drop the _ns (durations are formatted)
