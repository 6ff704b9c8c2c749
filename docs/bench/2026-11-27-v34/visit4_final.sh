#!/usr/bin/env bash
# Version 34, GPU visit 4: the final code (the LayerNorm kernel's two warp sums): the whole GPU suite and the
# SASS-order test.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 500 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu > "$OUT/visit4_gpu_suite.txt" 2>&1
tail -n 3 "$OUT/visit4_gpu_suite.txt"
grep -h "error vs fp64" "$OUT/visit4_gpu_suite.txt" > "$OUT/visit4_errors.txt"; tail -n 12 "$OUT/visit4_errors.txt"
timeout 80 python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py 2>&1 | tail -n 2 | tee "$OUT/visit4_sass.txt"
