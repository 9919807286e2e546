"""A Server harness with one worker thread (about 2 ms a sample), run in FindPeakPerformance mode.

Its capacity is near 500 samples/s, so the peak that meets a 20 ms p90 lies
below that; `peak.json` lands in the working directory.
"""

import array
import queue
import threading
import time

import mlperf_loadgen

SERVICE_S = 0.002
response = array.array("f", [1.0])
data, length = response.buffer_info()
work = queue.Queue()


def worker():
    while True:
        samples = work.get()
        if samples is None:
            return
        time.sleep(SERVICE_S * len(samples))
        mlperf_loadgen.QuerySamplesComplete([
            mlperf_loadgen.QuerySampleResponse(s.id, data, length * response.itemsize)
            for s in samples])


def main():
    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    settings = mlperf_loadgen.TestSettings()
    settings.scenario = mlperf_loadgen.TestScenario.Server
    settings.mode = mlperf_loadgen.TestMode.FindPeakPerformance
    settings.server_target_qps = 100
    settings.server_target_latency_ns = 20_000_000
    settings.server_target_latency_percentile = 0.9
    settings.min_query_count = 150
    settings.min_duration_ms = 0
    sut = mlperf_loadgen.ConstructSUT(work.put, lambda: None)
    qsl = mlperf_loadgen.ConstructQSL(64, 64, lambda s: None, lambda s: None)
    mlperf_loadgen.StartTest(sut, qsl, settings)
    work.put(None)
    mlperf_loadgen.DestroyQSL(qsl)
    mlperf_loadgen.DestroySUT(sut)


if __name__ == "__main__":
    main()
