#!/usr/bin/env bash
# The GPU checks, in one command, on a host with a CUDA GPU and a CUDA build of torch:
#   1. the GPU, its driver, torch and CUDA;
#   2. every CUDA test (pytest -m cuda; none may skip there);
#   3. benchmarks/batching.py with --device cuda at fp32 (with the Server peak), fp16, bf16;
#   4. a short Offline and Server run of the builtin mlp on the GPU with energy on, and the
#      energy block of each result.
# Everything it writes goes under $OUT_DIR (default runs/gpu-check).
#
#   bash scripts/gpu_checks.sh                  (or: make gpu-check)
#   PYTHON=/path/to/python bash scripts/gpu_checks.sh
#   bash scripts/gpu_checks.sh --fetch-wheels   (on a host with PyPI: fill .whl/ with the
#                                                wheels a bare GPU image lacks, for Python 3.12)
#
# The interpreter ($PYTHON, default python3) needs torch with CUDA and this project's
# dependencies; any wheels in .whl/ are installed into a scratch folder first (no index).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(hdrhistogram==0.10.8 pbr==7.1.3 nvidia-ml-py==13.615.71)

if [ "${1:-}" = "--fetch-wheels" ]; then
  mkdir -p .whl
  "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
  ls .whl
  exit 0
fi

PY=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-runs/gpu-check}
mkdir -p "$OUT_DIR"
if compgen -G ".whl/*.whl" >/dev/null; then
  SITE=$(mktemp -d)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" .whl/*.whl \
    || { echo "cannot install .whl/ into $PY (--fetch-wheels fetches them for Python 3.12)"; exit 1; }
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

echo "== 1. the GPU"
"$PY" - <<'EOF'
import sys
import torch
if not torch.cuda.is_available():
    sys.exit(f"torch {torch.__version__} sees no CUDA device: run this on a GPU host "
             "with a CUDA build of torch")
import hdrh  # noqa: F401  (a missing dependency fails here, not mid-way)
names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
try:
    import pynvml
    pynvml.nvmlInit()
    driver = pynvml.nvmlSystemGetDriverVersion()
except Exception as exc:  # noqa: BLE001
    driver = f"unknown ({exc!r})"
print(f"GPU: {', '.join(names)}; driver {driver}; torch {torch.__version__}, "
      f"CUDA {torch.version.cuda}; bf16 supported: {torch.cuda.is_bf16_supported()}")
import time
from loadgen.record.nvml import open_gpus
gpus, missing, close = open_gpus()
for gpu in gpus:  # what one reading of every figure costs the sampler thread
    began = time.perf_counter_ns()
    for _ in range(100):
        row = gpu.read()
    each_us = (time.perf_counter_ns() - began) / 100 / 1e3
    print(f"{gpu.device.name} {gpu.device.model}: {gpu.device.method}, one reading "
          f"{each_us:.0f} us: {row}")
print("not read:", [(m.source, m.reason) for m in missing])
close()
EOF
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,power.draw,power.limit --format=csv

echo "== 2. the CUDA tests"
set +e
"$PY" -m pytest -p no:cacheprovider -m cuda -rs -q tests/sut tests/loadgen 2>&1 | tee "$OUT_DIR/cuda-tests.log"
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ] || grep -q "skipped" "$OUT_DIR/cuda-tests.log"; then
  echo "CUDA tests failed or skipped on a GPU host (exit $status)"; exit 1
fi

echo "== 3. batching on the GPU"
"$PY" benchmarks/batching.py --device cuda --precision fp32 --rounds 1 --budget-s "${BUDGET_S:-60}" \
  | tee "$OUT_DIR/batching-fp32.txt"
for precision in fp16 bf16; do
  "$PY" benchmarks/batching.py --device cuda --precision "$precision" --rounds 1 --no-server \
    | tee "$OUT_DIR/batching-$precision.txt"
done

echo "== 4. runs with energy on"
SUT="builtin:mlp,device=cuda,max_batch_size=256"
"$PY" -m loadgen run scenarios/offline.toml --sut "$SUT" --out "$OUT_DIR/offline" \
  --set preset="'dev'" --set min_duration_s=10 --set target_qps=100000 \
  --set energy_sample_hz=20 --set energy_idle_s=2 || true
"$PY" -m loadgen run scenarios/server.toml --sut "$SUT,max_queue_delay_us=500" \
  --out "$OUT_DIR/server" --set preset="'dev'" --set min_duration_s=10 --set target_qps=5000 \
  --set target_latency_ms=20 --set energy_sample_hz=20 --set energy_idle_s=2 || true
for run in offline server; do
  "$PY" - "$OUT_DIR/$run/result.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
e = doc["energy"]
print(f"{doc['scenario']}: valid={doc['valid']} qps={doc['qps_completed']:.1f} "
      f"samples/s={doc['samples_per_s']:.1f}")
print(json.dumps({k: v for k, v in e.items() if k != "devices"}, indent=1))
for d in e["devices"]:
    print(json.dumps(d))
EOF
done
