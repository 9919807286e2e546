"""Several SUT endpoints in one run: the spec, the three policies, the per-replica breakdown,
and the breakdown summed over load workers."""

import pytest

from loadgen.adapters.registry import make_sut
from loadgen.adapters.replicas import ReplicaSet
from loadgen.api import run_loop, run_test
from loadgen.engine.session import run_session
from loadgen.errors import SutSpecError
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import load_settings

RUN = ["preset='dev'", "target_latency_ms=100", "target_qps=600", "min_duration_s=1",
       "warmup_s=0.2", "max_issue_lag_ms=1000"]


def _run(spec: str, extra=()):
    plan = RunPlan.of(load_settings(None, [*RUN, *extra]))
    outcome = run_loop(run_session(plan, make_sut(spec)))
    return outcome, outcome.sut["replicas"]


def test_the_spec_names_a_policy_and_two_or_more_specs():
    sut = make_sut("replicas:random:null;sim:service=const:1ms")
    assert isinstance(sut, ReplicaSet) and sut.policy == "random"
    assert [r.spec for r in sut.replicas] == ["null", "sim:service=const:1ms"]
    for spec, word in [("replicas:null;null", "replicas:POLICY:SPEC"),
                       ("replicas:fastest:null;null", "fastest"),
                       ("replicas:random:null", "at least two"),
                       ("replicas:random:null;replicas:random:null;null", "itself"),
                       ("replicas:random:null;bogus", "bogus")]:
        with pytest.raises(SutSpecError, match=word):
            make_sut(spec)


def test_round_robin_takes_each_in_turn_and_random_spreads_about_evenly():
    _, reps = _run("replicas:round_robin:null;null;null")
    issued = [r["issued"] for r in reps]
    assert max(issued) - min(issued) <= 1 and sum(issued) == sum(r["done"] for r in reps) > 0
    assert all(r["failed"] == 0 and r["sut"] == "null" for r in reps)
    _, reps = _run("replicas:random:null;null")
    a, b = (r["issued"] for r in reps)
    assert a != b and abs(a - b) < 0.2 * (a + b)


def test_least_outstanding_favours_the_faster_replica():
    _, reps = _run("replicas:least_outstanding:sim:service=const:1ms;sim:service=const:20ms")
    fast, slow = reps
    assert fast["issued"] > 3 * slow["issued"] > 0
    assert fast["service_latency_mean_ns"] < slow["service_latency_mean_ns"]
    assert slow["service_latency_max_ns"] >= 20_000_000 and slow["max_outstanding"] >= 1


def test_the_breakdown_is_summed_over_load_workers():
    settings = load_settings(None, [*RUN, "workers=2"])
    r = run_test(settings, "replicas:round_robin:null;null")
    reps = r.sut["replicas"]
    assert sum(x["done"] for x in reps) == sum(w["issued"] for w in r.workers["per_worker"])
    assert all(x["issued"] > 0 for x in reps)


def test_token_streaming_replicas_get_the_prompts_and_report_their_streams():
    sim = "llmsim:step_base=2ms,step_per_seq=100us,prefill_per_token=10us,max_seqs=8"
    settings = load_settings(None, [
        "preset='dev'", "scenario='Server'", "target_qps=40", "min_duration_s=1",
        "min_query_count=20", "use_token_latencies=true", "ttft_latency_ms=50",
        "tpot_latency_ms=10", "input_tokens=40", "output_tokens=6", "fixed_output=true",
        "max_issue_lag_ms=1000"])
    r = run_test(settings, f"replicas:round_robin:{sim};{sim}")
    ts = r.stats.token_stats
    assert ts is not None and ts.tokens.requests == r.stats.queries > 0
    assert ts.latencies["ttft_ns"].summary.count == r.stats.queries
    assert ts.tokens.output_total == 6 * ts.tokens.requests  # the prompts' max_tokens reached
    reps = r.sut["replicas"]
    assert [x["sut"] for x in reps] == ["llmsim", "llmsim"]
    assert all(x["done"] > 0 and x["failed"] == 0 for x in reps)
    assert sum(x["done"] for x in reps) >= r.stats.queries
