#!/usr/bin/env bash
# Does AIPerf read what `loadgen serve --model tiny-llm` reports? By hand, not in CI (the
# install takes minutes): AIPerf in its own virtualenv, a byte-level tokenizer built here
# (tiny-llm's vocabulary is bytes; nothing is downloaded), a shared-prefix streaming run,
# then its usage cache-read tokens and the server's prefix-cache counters side by side.
#
#   bash scripts/aiperf_check.sh            (AIPERF_VENV=/tmp/aiperf-venv by default)
#
# Everything it writes goes under $OUT_DIR (default runs/aiperf-check).
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
VENV=${AIPERF_VENV:-/tmp/aiperf-venv}
OUT_DIR=${OUT_DIR:-runs/aiperf-check}
mkdir -p "$OUT_DIR"
[ -x "$VENV/bin/aiperf" ] || { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q aiperf==0.13.0; }
"$VENV/bin/python" - "$OUT_DIR/bytetok" <<'PY'
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
tok = Tokenizer(models.BPE(vocab={ch: i for i, ch in enumerate(alphabet)}, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=alphabet[0]).save_pretrained(sys.argv[1])
PY
PYTHONUNBUFFERED=1 "$PYTHON" -m loadgen serve --model tiny-llm --http-port 0 --device cpu \
    > "$OUT_DIR/serve.log" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
for _ in $(seq 1 120); do grep -q '^ready' "$OUT_DIR/serve.log" && break; sleep 1; done
grep -q '^ready' "$OUT_DIR/serve.log" || { cat "$OUT_DIR/serve.log"; exit 1; }
URL=http://$(sed -n 's/.*http=\([^ ]*\).*/\1/p' "$OUT_DIR/serve.log")
"$VENV/bin/aiperf" profile --model tiny-llm --url "$URL" --endpoint-type completions --streaming \
    --tokenizer "$OUT_DIR/bytetok" --request-count 30 --concurrency 4 \
    --prompt-input-tokens-mean 100 --prompt-input-tokens-stddev 0 --output-tokens-mean 8 \
    --num-prefix-prompts 2 --prefix-prompt-length 64 --ui none --no-gpu-telemetry \
    --artifact-dir "$OUT_DIR/aiperf" > "$OUT_DIR/aiperf.log" 2>&1
grep -E 'Usage Prompt Cache Read' "$OUT_DIR/aiperf.log"
"$PYTHON" - "$OUT_DIR/aiperf/server_metrics_export.json" <<'PY'
import json, sys
metrics = json.load(open(sys.argv[1]))["metrics"]
totals = {k: metrics[k]["series"][0]["stats"]["total"]
          for k in ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries")}
print(f"server: {totals}; hit rate {totals['vllm:prefix_cache_hits'] / totals['vllm:prefix_cache_queries']:.2%}")
PY
