#!/usr/bin/env bash
# The scale-out check of issue #28 (about a minute on a 16-core host): the scaling table
# for 1, 2, 4 and 8 load processes (null SUT, saturated) and a 4-process Server run at
# 4 x 0.8 x the one-process VALID rate; one JSON summary in $OUT_DIR/scaleout.json.
# Runs from the source tree (PYTHONPATH only; $PYTHON, default python3, needs numpy and
# hdrhistogram).
#
#   bash scripts/scaleout_checks.sh
#   OUT_DIR=/some/dir PYTHON=/path/to/python bash scripts/scaleout_checks.sh [--processes 1,2,4]
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${OUT_DIR:-runs/scaleout-check}
mkdir -p "$OUT_DIR"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$PY" -c "import hdrh, numpy" || { echo "$PY lacks numpy or hdrhistogram"; exit 1; }
nproc; cat /proc/loadavg
"$PY" benchmarks/scaleout_check.py --out "$OUT_DIR/scaleout.json" "$@" 2>&1 | tee "$OUT_DIR/scaleout.log"
