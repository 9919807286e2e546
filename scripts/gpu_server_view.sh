#!/usr/bin/env bash
# The server's view on a CUDA GPU (for the lead's GPU checks), in one command:
#   1. `builtin:tiny-llm,device=cuda` in process: result.json `sut_memory` must hold the
#      process's peak RSS and a positive torch.cuda.max_memory_allocated;
#   2. `loadgen serve --model tiny-llm --device cuda` with a shared-prefix workload and
#      server_metrics=auto: the scraped prefix-cache hit rate against the usage cached_tokens.
# Everything it writes goes under $OUT_DIR (default runs/gpu-server-view); about a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-runs/gpu-server-view}
mkdir -p "$OUT_DIR"
cat > "$OUT_DIR/run.toml" <<'TOML'
scenario = "Server"
preset = "dev"
min_duration_s = 10.0
target_qps = 20.0
min_query_count = 100
tokenizer = "bytes"
input_tokens = 192
prefix_tokens = 128
prefix_groups = 4
output_tokens = 32
fixed_output = true
target_latency_ms = 5000.0
server_metrics = "auto"
server_metrics_interval_s = 0.5
endpoint_probe = true
TOML
"$PYTHON" -m loadgen run "$OUT_DIR/run.toml" --sut builtin:tiny-llm,device=cuda \
    --out "$OUT_DIR/inprocess" > "$OUT_DIR/inprocess.log" 2>&1 || true
"$PYTHON" - "$OUT_DIR/inprocess/result.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["sut_memory"]
print("in process:", m)
assert m["where"] == "in_process" and (m["gpu_memory_peak_bytes"] or 0) > 0, m
PY
PYTHONUNBUFFERED=1 "$PYTHON" -m loadgen serve --model tiny-llm --http-port 0 --device cuda \
    > "$OUT_DIR/serve.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do grep -q '^ready' "$OUT_DIR/serve.log" && break; sleep 1; done
ADDRESS=$(sed -n 's/.*http=\([^ ]*\).*/\1/p' "$OUT_DIR/serve.log")
"$PYTHON" -m loadgen run "$OUT_DIR/run.toml" --out "$OUT_DIR/remote" \
    --sut "openai://$ADDRESS/tiny-llm?endpoint=completions" > "$OUT_DIR/remote.log" 2>&1 || true
"$PYTHON" - "$OUT_DIR/remote/result.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
achieved = doc["tokens"]["cache"]["hit_rate"]["achieved"]
scraped = doc["server_metrics"]["deltas"]["prefix_cache_hit_rate"]
print(f"remote: usage cached_tokens hit rate {achieved:.4f}, scraped {scraped:.4f};",
      "KV max", doc["server_metrics"]["deltas"]["kv_cache_usage_max"],
      "endpoint", doc["endpoint"]["identity"], doc["endpoint"]["baseline_rtt"])
if doc["errors"] or doc["unfinished"]:  # the server counted lookups of requests never answered
    sys.exit(f"remote: {doc['errors']} errors, {doc['unfinished']} unfinished: lower target_qps")
assert abs(scraped - achieved) <= 0.01 * achieved, (scraped, achieved)
PY
