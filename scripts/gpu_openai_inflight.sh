#!/usr/bin/env bash
# openai:// against `loadgen serve --model tiny-llm` on a GPU, with the adapter's default
# max_in_flight (256) and with 16, for the lead's GPU checks (a report that a run at the
# default left every query unfinished came from this script running without the wheels in
# .whl/: on the H100 with them, 459 of 459 finished). Prints, for each run, the queries
# done, errors and unfinished, then what the server held afterwards (requests running and
# waiting, the last steps), which tells a stuck server from a stuck client. About two minutes.
#
#   bash scripts/gpu_openai_inflight.sh        (PYTHON, DEVICE=cuda, OUT_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-cuda}
OUT_DIR=${OUT_DIR:-runs/gpu-openai-inflight}
mkdir -p "$OUT_DIR"
if compgen -G ".whl/*.whl" >/dev/null; then  # as gpu_checks.sh: what a bare GPU image lacks
  SITE=$(mktemp -d)  # (without hdrhistogram every run crashed on import, and left no result)
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl \
    || echo "cannot install .whl/ into $PYTHON (gpu_checks.sh --fetch-wheels fetches them for 3.12)"
  export PYTHONPATH="$PWD:$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
PYTHONUNBUFFERED=1 "$PYTHON" -m loadgen serve --model tiny-llm --http-port 0 --device "$DEVICE" \
    --max-num-seqs 16 > "$OUT_DIR/serve.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do grep -q '^ready' "$OUT_DIR/serve.log" && break; sleep 1; done
grep -q '^ready' "$OUT_DIR/serve.log" || { cat "$OUT_DIR/serve.log"; exit 1; }
ADDRESS=$(sed -n 's/.*http=\([^ ]*\).*/\1/p' "$OUT_DIR/serve.log")
for CAP in 256 16; do
  timeout 300 "$PYTHON" -m loadgen run scenarios/tiny_llm.toml --set preset="'dev'" \
      --out "$OUT_DIR/cap$CAP" --force \
      --sut "openai://$ADDRESS/tiny-llm?endpoint=chat&max_in_flight=$CAP" \
      > "$OUT_DIR/cap$CAP.log" 2>&1 || true
  if [ ! -f "$OUT_DIR/cap$CAP/result.json" ]; then  # say why, then the server's side
    echo "max_in_flight=$CAP: no result; the run's log ends:"; tail -n 25 "$OUT_DIR/cap$CAP.log"
    echo "the server's log ends:"; tail -n 15 "$OUT_DIR/serve.log"
    continue
  fi
  "$PYTHON" - "$OUT_DIR/cap$CAP/result.json" "$CAP" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
print(f"max_in_flight={sys.argv[2]}: {doc['queries']} done, {doc['errors']} errors,"
      f" {doc['unfinished']} unfinished; errors_detail {json.dumps(doc.get('errors_detail'))}")
PY
  "$PYTHON" - "http://$ADDRESS" <<'PY'
import json, sys, urllib.request
base = sys.argv[1]
text = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
held = [line for line in text.splitlines()
        if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting"))]
steps = json.load(urllib.request.urlopen(f"{base}/debug/steps?last=3", timeout=10))["steps"]
print("  server afterwards:", "; ".join(held), "| last steps:",
      [(s["step"], s["running"], s["waiting"]) for s in steps])
PY
done
