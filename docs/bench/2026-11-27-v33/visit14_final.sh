#!/usr/bin/env bash
# Version 33, GPU visit 14: the final code (the one-token LayerNorm built for its K): the whole GPU suite and the
# SASS-order test.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 480 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu > "$OUT/visit14_gpu_suite.txt" 2>&1
tail -n 3 "$OUT/visit14_gpu_suite.txt"
grep -h "error vs fp64" "$OUT/visit14_gpu_suite.txt" > "$OUT/visit14_errors.txt"; tail -n 12 "$OUT/visit14_errors.txt"
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py 2>&1 | tail -n 2 | tee "$OUT/visit14_sass.txt"
