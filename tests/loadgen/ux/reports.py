"""Small run, sweep and find-peak directories with their report.html, for report tests and
docs screenshots. Runs use the `sim:` queue (errors included) on short dev settings."""

from __future__ import annotations

from pathlib import Path

from loadgen.campaigns.launch import launch
from loadgen.campaigns.search import SearchConfig, find_peak
from loadgen.campaigns.sweep import parse_axis, run_sweep
from loadgen.cli.main import main
from loadgen.plan.settings import load_settings
from loadgen.report.html import build_report

ROOT = Path(__file__).resolve().parents[3]
SHORT = ["preset='dev'", "min_duration_s=2", "warmup_s=0.2", "min_query_count=100",
         "target_latency_ms=20", "target_qps=300", "window_s=0.2", "max_issue_lag_ms=50"]
SIM = "sim:service=exp:1ms,servers=2,error_rate=0.005"


def run_dir(out: Path) -> Path:
    """One Server run on the simulated queue (about 2 s), with its report."""
    launch(load_settings(ROOT / "scenarios" / "server.toml", SHORT), SIM, out)
    build_report(out)
    return out


def multiturn_dir(out: Path) -> Path:
    """A Server run of three-turn sessions on llmsim (about 2 s), with its report (the
    per-turn table and chart)."""
    settings = load_settings(None, [*SHORT, "min_duration_s=1", "target_qps=20",
                                     "input_tokens=50", "output_tokens=4",
                                     "use_token_latencies=true", "ttft_latency_ms=1000",
                                     "tpot_latency_ms=1000", "turns=3", "think_time_ms=5"])
    launch(settings, "llmsim:step_base=1ms,step_per_seq=100us,prefill_per_token=10us", out)
    build_report(out)
    return out


def sweep_dir(out: Path) -> Path:
    """A two-point sweep of target_qps, one short launch each, with its report."""
    settings = load_settings(ROOT / "scenarios" / "server.toml",
                             [*SHORT, "min_duration_s=0.3", "window_s=0.1"])
    run_sweep(settings, SIM, [parse_axis("target_qps=200,600")], 1, out)
    build_report(out)
    return out


def find_peak_dir(out: Path) -> Path:
    """A find-peak search on the simulated queue (a few seconds), with its report."""
    settings = load_settings(ROOT / "scenarios" / "server.toml",
                             [*SHORT, "min_duration_s=0.5", "window_s=0.1",
                              "target_latency_ms=50"])
    cfg = SearchConfig(start_qps=500, tolerance=0.1, repeats=1, min_queries=500,
                       min_qps=100, max_qps=2000)
    find_peak(settings, "sim:service=exp:1ms,servers=1", out, cfg, budget_s=40)
    build_report(out)
    return out


def comparison_dir(out: Path) -> Path:
    """Two short runs, one server against two, compared into out (report included)."""
    settings = load_settings(ROOT / "scenarios" / "server.toml", [*SHORT, "min_duration_s=1"])
    for servers in (1, 2):
        launch(settings, f"sim:service=exp:1ms,servers={servers}", out / f"servers-{servers}")
    assert main(["compare", str(out / "servers-1"), str(out / "servers-2"), "--vary", "sut",
                 "--out", str(out)]) == 0
    return out
