"""A worker's own cost figures: garbage collections timed, its last core read."""

import gc
import os

from loadgen.engine.workers.core import _GcClock, _last_cpu


def test_the_gc_clock_counts_and_times_collections_only_while_on():
    clock = _GcClock()
    gc.collect()  # before the start: not counted
    clock.start()
    gc.collect()
    gc.collect()
    collections, ns = clock.stop()
    assert collections >= 2 and ns > 0
    gc.collect()  # after the stop: not counted, and the callback is gone
    assert clock.stop() == (collections, ns)
    assert clock._tick not in gc.callbacks


def test_the_last_core_is_one_this_process_may_run_on():
    assert _last_cpu() in os.sched_getaffinity(0)
