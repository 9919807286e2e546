#!/usr/bin/env bash
# The GPU checks, in one command, on a host with a CUDA GPU and a CUDA build of torch, from
# a source tree that is not pip-installed (PYTHONPATH only). Under 4 minutes on one H100:
# each section runs under `timeout` (seconds below), a failing section never stops the
# others, and one JSON summary of every figure is written at the end.
#
#   gpu        15  the GPU, driver, torch, CUDA, bf16, what one NVML reading costs
#   cuda-tests 85  every test marked `cuda` (pytest -m cuda; none may skip here), LLM
#                  engine's CUDA-equals-CPU tests included
#   scaleout   85  scripts/scaleout_checks.sh when it exists (alone, after the CUDA tests)
#   batch-fp32 55  benchmarks/batching.py --device cuda --json: mlp, cnn, transformer at
#   batch-bf16 55    batch 32 and 256 (6 cases), raw eager and graph loops beside, each
#                    with samples on the GPU (the default) and on the host
#                    (`host-samples`: start_from_device=false), and the no-compute model
#                    at 256 (the harness alone)
#   server     22  builtin:mlp,device=cuda Server at 5,000 QPS: VALID with p99 <= 2 ms?
#   llm        35  benchmarks/llm_serving.py --device cuda --json (peak searches 10 s)
#   energy     22  an Offline run of builtin:mlp on the GPU with energy on
#   gather     15  benchmarks/gather.py --json: the adapter's gather of cnn rows into a
#                  pinned block, fp32 and bf16, one thread and threaded, batch 32-256
#   profile    25  benchmarks/harness_profile.py --device cuda: where the harness spends
#                  a batch of 256 (the no-compute model, cProfile on the instance thread)
#   variants   the rest of the 4 minutes (if 20 s or more), at most 30 s: mlp and cnn at
#              fp32, batch 256, on three executor paths (serial, graphs-1, graphs-2; 6
#              cases of 0.4 s); cut off when time is up
#
# Everything goes under $OUT_DIR (default runs/gpu-check): one log per section in logs/,
# and summary.json (every figure, each section's exit status and seconds). When $OUT is
# set, summary.json and sections.log (every section's log, one after another) are copied
# there too.
#
#   bash scripts/gpu_checks.sh                  (or: make gpu-check)
#   PYTHON=/path/to/python bash scripts/gpu_checks.sh
#   bash scripts/gpu_checks.sh --fetch-wheels   (on a host with PyPI: fill .whl/ with the
#                                                wheels a bare GPU image lacks, for Python 3.12)
#
# The interpreter ($PYTHON, default python3) needs torch with CUDA and this project's
# dependencies; any wheels in .whl/ are installed into a scratch folder first (no index).
set -uo pipefail
cd "$(dirname "$0")/.."
WHEELS=(hdrhistogram==0.10.8 pbr==7.1.3 nvidia-ml-py==13.615.71
        pytest==9.2.0 pluggy==1.7.0 iniconfig==2.3.1 packaging==26.3)

if [ "${1:-}" = "--fetch-wheels" ]; then
  mkdir -p .whl
  "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}" || exit 1
  ls .whl
  exit 0
fi

PY=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-runs/gpu-check}
LOGS="$OUT_DIR/logs"
rm -rf "$LOGS" "$OUT_DIR/runs"
mkdir -p "$LOGS" "$OUT_DIR/runs"
STARTED=$(date +%s)
if compgen -G ".whl/*.whl" >/dev/null; then
  SITE=$(mktemp -d)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
    .whl/*.whl || echo "cannot install .whl/ into $PY (--fetch-wheels fetches them for 3.12)"
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
: > "$OUT_DIR/sections.tsv"

# run NAME SECONDS CMD...: the command under `timeout`, its output in logs/NAME.log and on
# stdout, its exit status and wall seconds in sections.tsv (124: it ran out of time).
run() {
  local name=$1 limit=$2 began rc
  shift 2
  echo "== $name (at most ${limit}s)"
  began=$(date +%s%N)
  timeout -k 5 "$limit" bash -c '"$@"' _ "$@" > "$LOGS/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( ($(date +%s%N) - began) / 1000000 ))" \
    "$limit" >> "$OUT_DIR/sections.tsv"
  tail -n 40 "$LOGS/$name.log"
  echo "-- $name: exit $rc"
}

gpu_info() {
  "$PY" - "$OUT_DIR/runs/gpu.json" <<'EOF'
import json, sys, time
import torch
info = {"torch": torch.__version__, "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available()}
if info["cuda_available"]:
    info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    info["bf16_supported"] = torch.cuda.is_bf16_supported()
try:
    import pynvml
    pynvml.nvmlInit()
    info["driver"] = str(pynvml.nvmlSystemGetDriverVersion())
except Exception as exc:  # noqa: BLE001
    info["driver"] = f"unknown ({exc!r})"
try:
    import hdrh  # noqa: F401  (a missing dependency shows here, not mid-way)
    from loadgen.record.nvml import open_gpus
    gpus, missing, close = open_gpus()
    for gpu in gpus:  # what one reading of every figure costs the sampler thread
        began = time.perf_counter_ns()
        for _ in range(100):
            row = gpu.read()
        info.setdefault("nvml_read_us", []).append(
            round((time.perf_counter_ns() - began) / 100 / 1e3, 1))
        print(f"{gpu.device.name} {gpu.device.model}: {gpu.device.method}: {row}")
    info["nvml_not_read"] = [[m.source, m.reason] for m in missing]
    close()
except Exception as exc:  # noqa: BLE001
    info["loadgen_import_error"] = repr(exc)
print(json.dumps(info))
json.dump(info, open(sys.argv[1], "w"))
sys.exit(0 if info["cuda_available"] and "loadgen_import_error" not in info else 1)
EOF
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,power.draw,power.limit --format=csv
}

cuda_tests() {
  local files
  "$PY" -c "import pytest" || { echo "no pytest for $PY: --fetch-wheels brings it"; return 1; }
  files=$(grep -rlE --include='test_*.py' 'mark\.cuda|pytest\.mark\.cuda' tests | sort)
  # shellcheck disable=SC2086
  "$PY" -m pytest -p no:cacheprovider -m cuda -rs -q --junitxml="$OUT_DIR/runs/cuda-tests.xml" $files
}

scaleout() {
  if [ -f scripts/scaleout_checks.sh ]; then
    OUT_DIR="$OUT_DIR/runs/scaleout" bash scripts/scaleout_checks.sh
  else
    echo "scripts/scaleout_checks.sh: not in this tree; skipped"
  fi
}

batching() {  # PRECISION
  "$PY" benchmarks/batching.py --device cuda --precision "$1" --json --no-server --rounds 1 \
    --seconds "${BATCH_SECONDS:-0.6}" --raw-modes eager,graph --harness \
    --variants default,host-samples
}

server() {
  "$PY" -m loadgen run scenarios/server.toml --sut "builtin:mlp,device=cuda" \
    --out "$OUT_DIR/runs/server" --set preset="'dev'" --set target_qps=5000 \
    --set target_latency_ms=2 --set min_duration_s=8 --set warmup_s=1
}

energy() {
  "$PY" -m loadgen run scenarios/offline.toml --sut "builtin:mlp,device=cuda,max_batch_size=256" \
    --out "$OUT_DIR/runs/energy" --set preset="'dev'" --set min_duration_s=3 \
    --set target_qps=3500000 --set energy_sample_hz=20 --set energy_idle_s=1
}

gather() {
  "$PY" benchmarks/gather.py --json --batches 32,128,256 --repeats 200
}

profile() {  # where the harness's per-batch time goes on this host
  "$PY" benchmarks/harness_profile.py --device cuda --batch 256 --seconds 0.5 --top 30
}

variants() {  # what each executor path gives, in whatever time the budget leaves
  "$PY" benchmarks/batching.py --device cuda --precision fp32 --json --no-server --rounds 1 \
    --seconds 0.4 --models mlp,cnn --offline-batches 256 --variants serial,graphs-1,graphs-2
}

llm() {
  "$PY" benchmarks/llm_serving.py --device cuda --json --rounds 1 --search-s 10
}

export PY OUT_DIR LOGS
export -f gpu_info cuda_tests scaleout batching server energy llm gather profile variants

run gpu 15 gpu_info
run cuda-tests 85 cuda_tests
# scale-out has no GPU figures, but runs alone: beside the CUDA tests (torch's CPU threads
# on every core) its efficiency figures measured the contention, not the load processes
run scaleout 85 scaleout
run batch-fp32 55 batching fp32
run batch-bf16 55 batching bf16
run server 22 server
run llm 35 llm
run energy 22 energy
run gather 15 gather
run profile 25 profile
LEFT=$(( 232 - ($(date +%s) - STARTED) ))
if [ "$LEFT" -ge 20 ]; then
  run variants "$(( LEFT < 30 ? LEFT : 30 ))" variants
fi

"$PY" - "$OUT_DIR" "$STARTED" <<'EOF'
"""Every figure of the sections, in one JSON document: summary.json."""
import json, re, sys, time
from pathlib import Path
from xml.etree import ElementTree

out = Path(sys.argv[1])
logs = out / "logs"
summary = {"elapsed_s": round(time.time() - int(sys.argv[2]), 1), "sections": {}}
for line in (out / "sections.tsv").read_text().splitlines():
    name, rc, seconds, limit = line.split("\t")
    summary["sections"][name] = {"exit": int(rc), "seconds": round(int(seconds) / 1e3, 1),
                                 "limit_s": int(limit), "timed_out": rc in ("124", "137")}


def json_lines(name):
    """Every JSON object in a section's log that starts a line (one a line, or indented)."""
    path = logs / f"{name}.log"
    text = path.read_text(errors="replace") if path.exists() else ""
    decoder, found, at = json.JSONDecoder(), [], 0
    for match in re.finditer(r"^\{", text, re.MULTILINE):
        if match.start() < at:
            continue
        try:
            doc, at = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        found.append(doc)
    return found


def result(run):
    path = out / "runs" / run / "result.json"
    if not path.exists():
        return None
    doc = json.loads(path.read_text())
    lat = doc.get("latency_ns") or {}
    return {"valid": doc.get("valid"), "reasons": doc.get("reasons"),
            "qps_scheduled": doc.get("qps_scheduled"), "qps_completed": doc.get("qps_completed"),
            "samples_per_s": doc.get("samples_per_s"),
            "p50_ms": lat.get("p50", 0) / 1e6, "p99_ms": lat.get("p99", 0) / 1e6,
            "executor": (doc.get("sut") or {}).get("executor"),
            "samples": (doc.get("sut") or {}).get("samples"),
            "executor_note": (doc.get("sut") or {}).get("executor_note"),
            "energy": {k: v for k, v in (doc.get("energy") or {}).items() if k != "devices"}}


def gpu():
    path = out / "runs" / "gpu.json"
    return json.loads(path.read_text()) if path.exists() else None


def cuda_tests():
    xml = out / "runs" / "cuda-tests.xml"
    if not xml.exists():
        return None
    suite = ElementTree.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["failed"] = [f"{c.get('classname')}::{c.get('name')}" for c in suite.iter("testcase")
                        if c.find("failure") is not None or c.find("error") is not None]
    return counts


def batching(precision):
    """The target is judged on the SUT's defaults; the host-samples cases ride beside."""
    cases = json_lines(f"batch-{precision}")
    ratios = [c["ratio"] for c in cases if "ratio" in c and c.get("variant") == "default"]
    host = [c["ratio"] for c in cases if "ratio" in c and c.get("variant") == "host-samples"]
    return {"cases": cases, "min_ratio": min(ratios, default=None),
            "min_ratio_host_samples": min(host, default=None),
            "all_at_least_0.9": bool(ratios) and min(ratios) >= 0.9 and len(ratios) == 6}


def server():
    found = result("server")
    if found is not None:
        found["target"] = "VALID with p99 <= 2 ms at 5,000 QPS"
        found["met"] = bool(found["valid"]) and found["p99_ms"] <= 2.0
    return found


def scaleout():
    found = out / "runs" / "scaleout" / "scaleout.json"
    if found.exists():
        return json.loads(found.read_text())
    path = logs / "scaleout.log"
    return json_lines("scaleout") or (path.read_text(errors="replace")[-2000:]
                                       if path.exists() else None)


for key, read in (("gpu", gpu), ("cuda_tests", cuda_tests),
                  ("batching_fp32", lambda: batching("fp32")),
                  ("batching_bf16", lambda: batching("bf16")), ("server", server),
                  ("llm_serving", lambda: json_lines("llm")),
                  ("variants", lambda: json_lines("variants")),
                  ("gather", lambda: json_lines("gather")),
                  ("harness_profile", lambda: json_lines("profile")),
                  ("energy", lambda: result("energy")), ("scaleout", scaleout)):
    try:
        summary[key] = read()
    except Exception as exc:  # noqa: BLE001 - one unreadable section never hides the others
        summary[key] = {"unreadable": repr(exc)}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(json.dumps(summary, indent=1))
EOF

if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  cp "$OUT_DIR/summary.json" "$OUT/"
  for f in "$LOGS"/*.log; do echo "===== $(basename "$f")"; cat "$f"; done > "$OUT/sections.log"
fi
echo "== done in $(( $(date +%s) - STARTED ))s; summary: $OUT_DIR/summary.json"
