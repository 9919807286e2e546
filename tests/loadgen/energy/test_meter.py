"""The sampler: idle baseline in the caller's thread, a thread over the run, a trace out."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from loadgen.record.devices import FIELDS, NAN_ROW, Device
from loadgen.record.energy import EnergyMeter, open_meter

from .fakes import FakeGpu, fake_nvml, rapl_zone


class CountingSource:
    """Returns the number of reads so far as its energy; notes the reading threads."""

    def __init__(self) -> None:
        self.device = Device("gpu0", "gpu", "counting", "nvml_energy_counter")
        self.reads = 0
        self.threads: set[str] = set()
        self.closed = 0
        self.read_by_sampler = threading.Event()

    def read(self) -> tuple[float, ...]:
        self.reads += 1
        self.threads.add(threading.current_thread().name)
        if threading.current_thread().name == "loadgen-energy":
            self.read_by_sampler.set()
        row = list(NAN_ROW)
        row[FIELDS.index("energy_j")] = float(self.reads)
        return tuple(row)

    def close(self) -> None:
        self.closed += 1


def test_idle_then_run_give_a_trace_in_time_order_read_off_the_callers_thread() -> None:
    source = CountingSource()
    meter = EnergyMeter([source], sample_hz=200, idle_s=0.05)
    meter.idle()
    idle_reads = source.reads
    assert idle_reads >= 2 and source.threads == {threading.current_thread().name}
    meter.start()
    started_ns = time.perf_counter_ns()
    assert meter.latest()[0][0] is source.device  # the first reading is taken by start()
    assert source.read_by_sampler.wait(10)
    trace = meter.stop()
    assert trace.t_ns[0] <= started_ns  # the span opens before whatever follows start()
    assert trace.devices == (source.device,)
    assert trace.values.shape == (trace.t_ns.size, 1, len(FIELDS))
    assert trace.t_ns.size >= 2 and np.all(np.diff(trace.t_ns) >= 0)
    assert trace.idle_t_ns.size == idle_reads
    assert trace.idle_values[-1, 0, FIELDS.index("energy_j")] == idle_reads
    assert trace.values[-1, 0, FIELDS.index("energy_j")] == source.reads  # stop reads last
    assert trace.idle_t_ns[-1] <= trace.t_ns[0]
    assert source.closed == 1
    meter.close()
    assert source.closed == 1  # idempotent


def test_no_sources_costs_nothing_no_thread_and_an_empty_trace() -> None:
    meter = EnergyMeter([], sample_hz=10, idle_s=5.0)
    meter.idle()  # returns at once: nothing to read
    meter.start()
    assert meter._thread is None
    trace = meter.stop()
    assert trace.devices == () and trace.t_ns.size == 0


def test_a_rate_must_be_positive() -> None:
    with pytest.raises(ValueError, match="sample_hz"):
        EnergyMeter([], sample_hz=0, idle_s=0)


def test_open_meter_off_is_none_and_auto_finds_fake_gpus_and_packages(tmp_path: Path) -> None:
    assert open_meter("off", 10, 0) is None
    with pytest.raises(ValueError, match="energy must be one of"):
        open_meter("on", 10, 0)
    rapl_zone(tmp_path, "intel-rapl:0", "package-0", 1)
    nvml = fake_nvml([FakeGpu(), FakeGpu(counter=False)])
    meter = open_meter("auto", 10, 0, nvml=nvml, powercap_root=tmp_path)
    assert meter is not None
    assert [d.name for d in meter.devices] == ["gpu0", "gpu1", "cpu-package-0"]
    assert meter.unmeasured == ()
    meter.close()
    assert nvml.calls[-1] == "nvmlShutdown"
    bare = open_meter("auto", 10, 0, nvml=fake_nvml([], init_error=True),
                      powercap_root=tmp_path / "none")
    assert bare is not None and bare.devices == ()
    assert [u.source for u in bare.unmeasured] == ["gpu", "cpu"]
