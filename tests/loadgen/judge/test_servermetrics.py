"""Server metrics over the measured window: counters as deltas, gauges as series, histogram
percentiles from bucket deltas; vLLM, SGLang and TGI names mapped; failures as warnings."""

from __future__ import annotations

import pytest

from loadgen.judge.servermetrics import ServerMetrics, server_metrics, server_warnings
from loadgen.record.scrape import Scrape, ScrapeTrace, ServerScraper, parse_scrape

S = 1_000_000_000


def _trace(texts: list[str], url: str = "http://127.0.0.1:1/metrics") -> ScrapeTrace:
    scrapes, types = [], {}
    for i, text in enumerate(texts):
        values, seen = parse_scrape(text)
        types.update(seen)
        scrapes.append(Scrape(i * S, values))
    return ScrapeTrace(url, 1.0, tuple(scrapes), types)


def _vllm(hits: int, queries: int, preempted: int, usage: float, running: int,
          ttft: tuple[int, int, int]) -> str:
    fast, slow, inf = ttft
    return f"""# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{model_name="m"}} {hits}
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{model_name="m"}} {queries}
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{{model_name="m"}} {preempted}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{model_name="m"}} {usage}
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m"}} {running}
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{{model_name="m"}} {queries // 10}
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {queries // 10 * 4}
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {queries // 10 * 3}
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{le="0.1",model_name="m"}} {fast}
vllm:time_to_first_token_seconds_bucket{{le="1.0",model_name="m"}} {fast + slow}
vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="m"}} {fast + slow + inf}
vllm:time_to_first_token_seconds_count{{model_name="m"}} {fast + slow + inf}
vllm:time_to_first_token_seconds_sum{{model_name="m"}} {0.05 * fast + 0.5 * slow + 2 * inf}
# TYPE my_own_thing gauge
my_own_thing 7
"""


def test_vllm_counters_are_deltas_over_the_window_and_gauges_series() -> None:
    trace = _trace([_vllm(100, 1000, 5, 0.1, 1, (10, 0, 0)),   # t=0: before the window
                    _vllm(130, 1100, 6, 0.5, 4, (10, 0, 0)),   # t=1: opens it
                    _vllm(190, 1300, 9, 0.9, 8, (60, 50, 0)),  # t=2
                    _vllm(250, 1500, 9, 0.3, 2, (100, 100, 0)),  # t=3: closes it
                    _vllm(999, 9999, 99, 1.0, 9, (999, 9, 9))])  # t=4: after
    m = server_metrics(trace, int(1.5 * S), int(2.5 * S), origin_ns=0)
    d = m.deltas
    assert m.window_s == [1.0, 3.0] and m.servers == ["vllm"]
    assert d["prefix_cache_hits"] == 120 and d["prefix_cache_queries"] == 400
    assert d["prefix_cache_hit_rate"] == pytest.approx(0.3)
    assert d["preemptions"] == 3 and d["kv_cache_usage_max"] == 0.9
    assert d["requests_running_max"] == 8
    assert m.series["kv_cache_usage"] == [[1.0, 0.5], [2.0, 0.9], [3.0, 0.3]]
    assert d["spec_decode_acceptance_rate"] == pytest.approx(0.75)
    assert d["spec_decode_mean_acceptance_length"] == pytest.approx(1 + 3)  # 3 of 4 + bonus
    ttft = m.histograms["ttft"]  # 90 in (0, 0.1], 100 in (0.1, 1.0]
    assert ttft["count"] == 190
    assert ttft["p50_ns"] == round((0.1 + 0.9 * (95 - 90) / 100) * 1e9)
    assert ttft["p99_ns"] == round((0.1 + 0.9 * (188.1 - 90) / 100) * 1e9)
    assert m.raw is None
    assert "my_own_thing" in server_metrics(trace, S, 3 * S, 0, raw=True).raw  # type: ignore[operator]
    assert ServerMetrics.from_dict(m.as_dict()) == m


def test_a_counter_reset_counts_from_zero() -> None:
    trace = _trace([_vllm(500, 1000, 5, 0.1, 1, (0, 0, 0)), _vllm(40, 100, 1, 0.1, 1, (0, 0, 0))])
    d = server_metrics(trace, 0, S, 0).deltas
    assert (d["prefix_cache_hits"], d["prefix_cache_queries"], d["preemptions"]) == (40, 100, 1)


def _sglang(prompt: int, cached: int, retracted: int, usage: float, accept: float) -> str:
    return f"""# TYPE sglang:prompt_tokens_total counter
sglang:prompt_tokens_total{{model_name="m"}} {prompt}
# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{{model_name="m",cache_source="device"}} {cached}
sglang:cached_tokens_total{{model_name="m",cache_source="host"}} {cached // 2}
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{{model_name="m"}} {retracted}
# TYPE sglang:token_usage gauge
sglang:token_usage{{model_name="m"}} {usage}
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="m"}} 3
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{model_name="m"}} {accept}
"""


def _tgi(success: int, queue: int, tokens: float) -> str:
    return f"""# TYPE tgi_request_success counter
tgi_request_success {success}
# TYPE tgi_queue_size gauge
tgi_queue_size {queue}
# TYPE tgi_request_generated_tokens histogram
tgi_request_generated_tokens_bucket{{le="64"}} {success}
tgi_request_generated_tokens_bucket{{le="+Inf"}} {success}
tgi_request_generated_tokens_sum {tokens}
tgi_request_generated_tokens_count {success}
# TYPE tgi_request_duration histogram
tgi_request_duration_bucket{{le="0.5"}} {success}
tgi_request_duration_bucket{{le="+Inf"}} {success}
tgi_request_duration_sum {0.25 * success}
tgi_request_duration_count {success}
"""


def test_sglang_and_tgi_names_map_to_ours() -> None:
    sg = server_metrics(_trace([_sglang(1000, 200, 1, 0.2, 2.0),
                                _sglang(3000, 1000, 4, 0.7, 3.0)]), 0, S, 0)
    assert sg.servers == ["sglang"]
    assert sg.deltas["prefix_cache_hits"] == 800 + 400  # summed over cache sources
    assert sg.deltas["prefix_cache_hit_rate"] == pytest.approx(1200 / 2000)
    assert sg.deltas["preemptions"] == 3 and sg.deltas["kv_cache_usage_max"] == 0.7
    assert sg.deltas["spec_decode_mean_acceptance_length"] == pytest.approx(2.5)
    tgi = server_metrics(_trace([_tgi(10, 0, 300), _tgi(30, 5, 1100)]), 0, S, 0)
    assert tgi.servers == ["tgi"]
    assert tgi.deltas["requests_succeeded"] == 20 and tgi.deltas["generation_tokens"] == 800
    assert tgi.deltas["requests_waiting_max"] == 5
    assert tgi.deltas["prefix_cache_hit_rate"] is None and tgi.deltas["preemptions"] is None
    assert tgi.histograms["e2e"]["count"] == 20 and tgi.histograms["e2e"]["mean_ns"] == 250_000_000


def test_a_dead_endpoint_is_counted_with_its_reason_and_warned() -> None:
    def refuse(url: str, timeout_s: float) -> str:
        raise ConnectionRefusedError(111, "Connection refused")

    scraper = ServerScraper("http://127.0.0.1:9/metrics", 0.01, fetch=refuse)
    scraper.start()
    trace = scraper.stop()
    assert trace.scrapes == () and trace.failures >= 1  # no closing scrape of a dead one
    assert trace.errors == ("ConnectionRefusedError: [Errno 111] Connection refused",)
    m = server_metrics(trace, 0, S, 0)
    assert m.deltas["prefix_cache_hit_rate"] is None and m.reason == "no scrape succeeded"
    (warning,) = server_warnings(m)
    assert "could not be scraped (ConnectionRefusedError" in warning


def test_a_body_that_is_not_prometheus_text_fails_the_scrape() -> None:
    scraper = ServerScraper("http://x/metrics", 1.0, fetch=lambda url, t: "<html>hi</html>")
    scraper.scrape()
    trace = scraper.stop()
    assert trace.failures == 1 and trace.errors[0].startswith("ValueError")


def test_the_latest_scrape_is_re_exported_live() -> None:
    from loadgen.live.server_metrics import server_gauges

    scraper = ServerScraper("http://x/metrics", 1.0,
                            fetch=lambda url, t: _vllm(1, 2, 0, 0.625, 3, (0, 0, 0)))
    assert list(server_gauges(["run_id"], ["r"], scraper)) == []  # nothing scraped yet
    scraper.scrape()
    live = {f.name: f.samples[0].value for f in server_gauges(["run_id"], ["r"], scraper)}
    assert live == {"loadgen_server_kv_cache_usage_ratio": 0.625,
                    "loadgen_server_requests_running": 3}
