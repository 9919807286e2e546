#!/usr/bin/env bash
# Regenerate the Python stubs of oipwire/proto from grpc_predict_v2.proto.
#
#   scripts/gen_proto.sh            rewrite the committed stubs in place
#   scripts/gen_proto.sh OUT_DIR    write them under OUT_DIR/oipwire/proto/
#
# protoc runs from the repo root so the generated gRPC module imports
# oipwire.proto.grpc_predict_v2_pb2. Python: $PYTHON, else .venv, else python3.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "${1:-$root}" && cd "${1:-$root}" && pwd)"
py="${PYTHON:-}"
if [[ -z "$py" ]]; then
  if [[ -x "$root/.venv/bin/python" ]]; then py="$root/.venv/bin/python"; else py=python3; fi
fi
cd "$root"
"$py" -m grpc_tools.protoc -I . \
  --python_out="$out" --pyi_out="$out" --grpc_python_out="$out" \
  oipwire/proto/grpc_predict_v2.proto
