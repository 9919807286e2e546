"""A harness in the style of LoadGen's Python demos (loadgen/demos/py_demo_*.py).

Usage: demo.py SCENARIO MODE [tokens]; a user.conf in the working directory is read
(model `demo`) over the harness's settings. It imports `mlperf_loadgen`, whichever
is first on the path: MLCommons' package, or a one-line module re-exporting
`loadgen.mlperf`. Each issued query is answered from its own thread after a
short sleep, as the demos do; with `tokens`, the first token is reported with
FirstTokenComplete before the full answer (with its token count).
"""

import array
import os
import sys
import threading
import time

import mlperf_loadgen

SLEEP_S = 0.002
OFFLINE_SLEEP_S = 0.15
TOKENS = 12

response_array = array.array("f", [0, 1, 7, 8, 15, 16, 31, 32])
response_data, response_len = response_array.buffer_info()
response_size = response_len * response_array.itemsize


def load_samples_to_ram(query_samples):
    del query_samples


def unload_samples_from_ram(query_samples):
    del query_samples


def process_query_async(query_samples, tokens, sleep_s):
    if tokens:
        mlperf_loadgen.FirstTokenComplete([
            mlperf_loadgen.QuerySampleResponse(s.id, response_data, 4) for s in query_samples])
    time.sleep(sleep_s)
    mlperf_loadgen.QuerySamplesComplete([
        mlperf_loadgen.QuerySampleResponse(s.id, response_data, response_size, TOKENS)
        if tokens else mlperf_loadgen.QuerySampleResponse(s.id, response_data, response_size)
        for s in query_samples])


def main(scenario, mode, tokens):
    settings = mlperf_loadgen.TestSettings()
    settings.scenario = getattr(mlperf_loadgen.TestScenario, scenario)
    settings.mode = getattr(mlperf_loadgen.TestMode, mode)
    settings.min_query_count = 100
    settings.min_duration_ms = 0
    settings.server_target_qps = 200
    settings.server_target_latency_ns = 1_000_000_000  # generous: no query over it on a busy box
    settings.ttft_latency = settings.tpot_latency = 1_000_000_000
    settings.offline_expected_qps = 1000
    settings.use_token_latencies = tokens
    if scenario == "Offline":
        settings.min_duration_ms = 100
    if os.path.exists("user.conf"):  # as MLPerf's reference harnesses read theirs
        settings.FromConfig("user.conf", "demo", scenario)
    sleep_s = OFFLINE_SLEEP_S if scenario == "Offline" else SLEEP_S

    def issue_query(query_samples):
        threading.Thread(target=process_query_async,
                         args=[query_samples, tokens, sleep_s]).start()

    def flush_queries():
        pass

    log_settings = mlperf_loadgen.LogSettings()
    log_settings.log_output.outdir = "."
    log_settings.enable_trace = False
    sut = mlperf_loadgen.ConstructSUT(issue_query, flush_queries)
    qsl = mlperf_loadgen.ConstructQSL(256, 128, load_samples_to_ram, unload_samples_from_ram)
    mlperf_loadgen.StartTestWithLogSettings(sut, qsl, settings, log_settings)
    mlperf_loadgen.DestroyQSL(qsl)
    mlperf_loadgen.DestroySUT(sut)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], len(sys.argv) > 3 and sys.argv[3] == "tokens")
