"""Headline sentences that carry their conditions.

    412 QPS at p99 <= 50 ms (Server; mlp fp32 on cpu x2 workers; max batch 32;
    60 s x 5 launches, median; spread 405-418)

The figure is a median over launches (never the best of N), and the parenthesis
names what it depends on: scenario, SUT (model, precision, device, workers),
batching, duration and number of launches, and the spread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.plan.units import format_duration
from loadgen.report.peakdoc import PeakDocument
from loadgen.report.result import RunResult
from loadgen.report.sweepdoc import SweepPoint

__all__ = ["conditions", "noisy_flag", "peak_headline", "point_headline", "run_headline",
           "slo_phrase", "sut_phrase", "value_phrase"]


def _ms(ns: float) -> str:
    return format_duration(ns)


def _num(value: float) -> str:
    """A rate as people write it: 16440, 412, 3.25."""
    return f"{value:.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _duration(ns: float) -> str:
    return format_duration(ns)


def sut_phrase(sut: Mapping[str, Any]) -> list[str]:
    """What the SUT was: 'mlp fp32 on cpu x2 workers', 'max batch 32'; sim and null too."""
    kind = str(sut.get("sut", "?"))
    if kind == "null":
        return ["null SUT"]
    if kind == "sim":
        servers = int(sut.get("servers", 1))
        return [(f"sim {sut.get('service')} {_duration(float(sut.get('service_mean_ns', 0)))} "
                f"x{servers} server{'s' if servers != 1 else ''}")]
    model = str(sut.get("model") or kind.removeprefix("builtin:"))
    devices = sut.get("device") or []
    where = "+".join(str(d) for d in devices) if isinstance(devices, list) else str(devices)
    parts = [" ".join(p for p in (model, str(sut.get("precision") or ""),
                                  f"on {where}" if where else "") if p)]
    workers = sut.get("workers")
    if workers:
        parts[0] += f" x{workers} worker{'s' if workers != 1 else ''}"
    batcher = sut.get("batcher")
    if isinstance(batcher, Mapping) and "max_batch_size" in batcher:
        parts.append(f"max batch {batcher['max_batch_size']}")
    return parts


def slo_phrase(settings: Mapping[str, Any]) -> str:
    """'p99 <= 50 ms' (token mode: 'p99 TTFT <= 2000 ms, TPOT <= 200 ms'), or '' without."""
    if settings.get("use_token_latencies"):
        return (f"p{float(settings['target_latency_percentile']):g} TTFT <= "
                f"{float(settings['ttft_latency_ms']):g} ms, TPOT <= "
                f"{float(settings['tpot_latency_ms']):g} ms")
    target = float(settings.get("target_latency_ms") or 0)
    if not target:
        return ""
    return f"p{float(settings['target_latency_percentile']):g} <= {target:g} ms"


def value_phrase(scenario: str, name: str, value: float) -> str:
    """The headline figure in its unit: '412 QPS', '1.2e+03 samples/s', 'p90 1.5 ms'."""
    if name.endswith("_ns"):
        tag = next((t for t in name.split("_") if t[:1] == "p" and t[1:].isdigit()), "")
        return f"{tag} latency {_ms(value)}".strip()
    if name == "tokens_per_s":
        return f"{_num(value)} tokens/s"
    if scenario == "Offline" or name == "samples_per_s":
        return f"{_num(value)} samples/s"
    return f"{_num(value)} QPS"


def conditions(scenario: str, settings: Mapping[str, Any], sut: Mapping[str, Any],
               duration_s: float, launches: int) -> list[str]:
    """The parenthesis: scenario; SUT; duration x launches."""
    preset = "" if settings.get("preset", "mlperf") == "mlperf" else f", {settings['preset']} preset"
    run = f"{duration_s:.3g} s x {launches} launch{'es' if launches != 1 else ''}"
    return [scenario + preset, *sut_phrase(sut), run + (", median" if launches > 1 else "")]


def _sentence(value: str, slo: str, parts: Sequence[str]) -> str:
    head = f"{value} at {slo}" if slo else value
    return f"{head} ({'; '.join(p for p in parts if p)})"


def run_headline(result: RunResult) -> str:
    """One run: '412 QPS at p99 <= 50 ms (Server; ...; 60 s x 1 launch)'."""
    scenario = str(result.settings.scenario)
    settings = result.settings.as_dict()
    value = value_phrase(scenario, result.headline.name, result.headline.value)
    parts = conditions(scenario, settings, result.sut, result.stats.duration_s, 1)
    if not result.valid:
        parts.append("INVALID")
    return _sentence(value, slo_phrase(settings) if scenario == "Server" else "", parts)


def point_headline(point: SweepPoint) -> str:
    """A sweep point: the median headline over launches with its min-max spread."""
    settings = point.settings
    scenario = str(settings["scenario"])
    stats = point.stats["headline"]
    name = {"Server": "scheduled_qps", "Offline": "samples_per_s"}.get(
        scenario, "p90_latency_ns" if scenario == "SingleStream" else "p99_latency_ns")
    value = value_phrase(scenario, name, float(stats.median))
    parts = conditions(scenario, settings, point.sut_description, float(point.duration_s),
                       int(stats.n))
    if stats.n > 1:
        low, high = (_ms(float(x)) if name.endswith("_ns") else _num(float(x))
                     for x in (stats.min, stats.max))
        parts.append(f"spread {low}-{high}")
    valid, n = point.valid_launches, stats.n
    if valid < n:
        parts.append(f"{valid} of {n} launches VALID")
    return _sentence(value, slo_phrase(settings) if scenario == "Server" else "", parts)


def peak_headline(doc: PeakDocument) -> str:
    """find-peak: the highest passing rate, its bracket, trials and confidence."""
    settings, probes, goal = doc.settings, doc.probes, doc.goal
    attainment = goal.goal == "attainment"
    slo = f"SLO attainment >= {goal.min_attainment:g}" if attainment else slo_phrase(settings)
    harness = " (the load generator fell behind its schedule there)" if doc.harness_high else ""
    low, high = doc.bracket
    if not doc.peak_qps or low is None:
        lowest = min((p.target_qps for p in probes), default=0.0)
        return f"no rate met {slo or 'the test'}: the lowest probed, {lowest:g} QPS, " \
               f"failed{harness} ({doc.status}; {len(probes)} probes)"
    at_peak = [p for p in probes if p.target_qps == low and not p.harness_limited]
    duration = min((float(p.duration_s) for p in at_peak), default=0.0)
    parts = conditions("Server", settings, doc.sut_description or {}, duration, 1)
    parts[-1] = f"{duration:.3g} s x {len(at_peak)} trial{'s' if len(at_peak) != 1 else ''} " \
                f"at the peak, every one {'passing' if attainment else 'VALID'}"
    span = f"bracket {_num(low)}-{_num(high)} QPS{harness}" if high else \
        "not bracketed: the ceiling passed"
    parts.append(f"{span}, confidence {doc.confidence:.2f}" if doc.confidence is not None
                 else span)
    if doc.status != "converged":
        parts.append(f"search stopped: {doc.status}")
    return _sentence(f"{_num(low)} QPS", slo, parts)


def noisy_flag(point: SweepPoint) -> str:
    """'NOISY (latency_p99_ns cv 8.1%)  ' for a sweep point whose launches disagree, naming
    each noisy metric and its coefficient of variation; '' otherwise."""
    named = [f"{m} cv {point.stats[m].cv or 0.0:.1%}" for m in point.noisy_metrics]
    return f"NOISY ({', '.join(named)})  " if named else ""
