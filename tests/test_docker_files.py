"""docker/: Dockerfiles, compose, Prometheus and Grafana files parse and agree with each other.

No Docker engine is needed: every file is parsed, and `promtool` (when installed) checks
the Prometheus config and every dashboard query.
"""

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.live.prometheus import PrometheusExporter
from loadgen.plan.plan import RunPlan
from loadgen.plan.settings import load_settings
from loadgen.record.collect import Collector

yaml = pytest.importorskip("yaml", reason="pyyaml is a test dependency")

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
DASHBOARD = DOCKER / "grafana" / "dashboards" / "loadgen.json"
PINNED = re.compile(r"^[a-z0-9][a-z0-9./_-]*:v?\d+\.\d+(\.\d+)?([.-][a-z0-9.-]+)?$")
METRIC = re.compile(r"\b(?:loadgen|sut)_[a-z0-9_]+\b")
GRAFANA_VARS = {"$__rate_interval": "1m", "$__range": "5m", "$run_id": ".*"}


def _instructions(path):
    """(INSTRUCTION, argument text) per Dockerfile instruction, continuations joined."""
    out, pending = [], ""
    for line in path.read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        word, _, rest = pending.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
        pending = ""
    return out


def _exec_form(text):
    value = json.loads(text)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), text
    return value


def _compose():
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


def _loadgen_families():
    """Every family name the loadgen exporter can emit (a run with all of its features)."""
    c = Collector(slo_ns=10**6)
    c.issued_query(0, 0, 0, 1, measured=True)
    c.done(0, 10**6, components={"compute": 10**5})
    c.issued_query(1, 0, 0, 1, measured=True)
    c.failed(1, 10, "timeout")
    exporter = PrometheusExporter()
    exporter.start(RunPlan.of(load_settings(None, ["preset='dev'", "target_latency_ms=5"])),
                   SimpleNamespace(name="x"), c)
    text = generate_latest(exporter.registry).decode()
    return {f.name for f in text_string_to_metric_families(text)}


def _family(metric):
    for suffix in ("_bucket", "_count", "_sum", "_total"):
        if metric.endswith(suffix):
            return metric.removesuffix(suffix)
    return metric


def _exprs():
    doc = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]


@pytest.mark.parametrize("name", ["Dockerfile.sut", "Dockerfile.loadgen"])
def test_dockerfile_pins_its_base_and_runs_loadgen(name):
    steps = _instructions(DOCKER / name)
    args = dict(a.split("=", 1) for w, a in steps if w == "ARG" and "=" in a)
    froms = [re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], a) for w, a in steps if w == "FROM"]
    assert froms and all(PINNED.match(image.split()[0]) for image in froms), froms
    entry = [_exec_form(a) for w, a in steps if w == "ENTRYPOINT"]
    cmd = [_exec_form(a) for w, a in steps if w == "CMD"]
    assert len(entry) == 1 and len(cmd) == 1
    assert entry[0][0] == "loadgen"
    assert ("USER", "root") not in steps and any(w == "USER" for w, _ in steps)
    ignore = [line for line in (DOCKER / f"{name}.dockerignore").read_text().splitlines()
              if line and not line.startswith("#")]
    assert ignore[0] == "*"  # an allowlist: nothing enters the build context unless named
    assert {"!loadgen/", "!sut/", "!pyproject.toml", "!constraints.txt"} <= set(ignore)


def test_sut_image_serves_both_protocols_on_all_interfaces_in_cpu_and_cuda_variants():
    steps = _instructions(DOCKER / "Dockerfile.sut")
    argv = [*_exec_form(dict(steps)["ENTRYPOINT"]), *_exec_form(dict(steps)["CMD"])]
    assert argv[:2] == ["loadgen", "serve"] and "--model" in argv
    for flag, value in (("--host", "0.0.0.0"), ("--http-port", "8000"), ("--grpc-port", "8001")):
        assert argv[argv.index(flag) + 1] == value
    assert dict(steps)["EXPOSE"].split() == ["8000", "8001"]
    install = next(a for w, a in steps if w == "RUN" and "VARIANT" in a)
    assert "cpu)" in install and "cuda)" in install and "exit 1" in install
    assert "/v2/health/ready" in dict(steps)["HEALTHCHECK"]


def test_compose_wires_sut_loadgen_prometheus_and_grafana():
    services = _compose()["services"]
    assert set(services) == {"sut", "loadgen", "prometheus", "grafana"}
    for name, service in services.items():
        if "build" in service:
            assert (DOCKER / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
        else:
            assert PINNED.match(service["image"]), (name, service["image"])
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), (name, port)  # published on loopback only
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DOCKER / source).exists(), source
    command = services["loadgen"]["command"]
    assert command[0] == "run" and "--sut" in command
    assert command[command.index("--prometheus-port") + 1] == "0.0.0.0:9464"
    assert "http://sut:8000/" in command[command.index("--sut") + 1]
    assert services["loadgen"]["depends_on"]["sut"]["condition"] == "service_healthy"


def test_gpu_overlay_builds_the_cuda_variant_on_nvidia_devices():
    sut = yaml.safe_load((DOCKER / "compose.gpu.yaml").read_text())["services"]["sut"]
    assert sut["build"]["args"]["VARIANT"] == "cuda"
    (device,) = sut["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia" and "gpu" in device["capabilities"]


def test_prometheus_scrapes_both_sides_where_compose_serves_them():
    config = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert jobs["loadgen"]["static_configs"][0]["targets"] == ["loadgen:9464"]
    assert jobs["sut"]["static_configs"][0]["targets"] == ["sut:8000"]
    assert jobs["sut"].get("metrics_path", "/metrics") == "/metrics"
    seconds = {"loadgen": 1, "sut": 2}
    for name, job in jobs.items():
        assert job["scrape_interval"] == f"{seconds[name]}s"
        assert int(job["scrape_timeout"].rstrip("s")) <= seconds[name]
    mounts = _compose()["services"]["prometheus"]["volumes"]
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed "
                    "(Debian package `prometheus`)")
def test_promtool_accepts_the_config():
    subprocess.run(["promtool", "check", "config", str(DOCKER / "prometheus.yml")], check=True,
                   capture_output=True, timeout=60)


def test_grafana_provisions_the_datasource_and_the_dashboard():
    provisioning = DOCKER / "grafana" / "provisioning"
    (source,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())[
        "datasources"]
    assert (source["type"], source["uid"], source["url"]) == (
        "prometheus", "prometheus", "http://prometheus:9090")
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "loadgen.yaml").read_text())[
        "providers"]
    mounts = _compose()["services"]["grafana"]["volumes"]
    assert f"./grafana/dashboards:{provider['options']['path']}:ro" in mounts
    doc = json.loads(DASHBOARD.read_text())
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)) and doc["uid"] == "loadgen"
    for panel in doc["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == source["uid"] and panel["targets"], panel["title"]


def test_dashboard_covers_latency_throughput_batching_queueing_and_components():
    text = "\n".join(_exprs())
    for needed in ("histogram_quantile(0.99, sum by (le) (rate(loadgen_latency_seconds_bucket",
                   "loadgen_queries_good_total", "loadgen_queries_completed_total",
                   "sut_batch_size_bucket", "sut_queue_depth", "loadgen_component_seconds_bucket",
                   "sut_queue_seconds_bucket", "sut_compute_seconds_bucket"):
        assert needed in text, needed


def test_dashboard_queries_name_only_loadgen_metrics_that_exist():
    families = _loadgen_families()
    used = {m for e in _exprs() for m in METRIC.findall(e) if m.startswith("loadgen_")}
    assert used and {m for m in used if _family(m) not in families} == set()


def test_dashboard_queries_name_only_sut_metrics_that_exist():
    source = ROOT / "sut" / "metrics.py"
    if not source.is_file():
        pytest.skip("sut/metrics.py is not there yet")
    declared = set(re.findall(r"[\"'](sut_[a-z0-9_]+)[\"']", source.read_text()))
    used = {m for e in _exprs() for m in METRIC.findall(e) if m.startswith("sut_")}
    assert used and {m for m in used if _family(m) not in declared} == set()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed "
                    "(Debian package `prometheus`)")
def test_promtool_parses_every_dashboard_query(tmp_path):
    rules = []
    for i, expr in enumerate(_exprs()):
        for var, value in GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, expr
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    run = subprocess.run(["promtool", "check", "rules", str(path)], check=False,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
