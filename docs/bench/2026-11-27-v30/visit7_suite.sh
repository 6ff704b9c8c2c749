#!/usr/bin/env bash
# Version 30, GPU visit 7: the whole GPU suite and the SASS-order tests on the session's final code (version
# 29's kernels and code; the fold was dropped), on the H200.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pytest -m gpu -q -rs -s -p no:cacheprovider tests/gpu > "$OUT/gpu_suite.txt" 2>&1
tail -n 2 "$OUT/gpu_suite.txt"; grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite.txt" | head -20
grep -E "error vs fp64" "$OUT/gpu_suite.txt" | head -20
python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py > "$OUT/sass.txt" 2>&1; tail -n 1 "$OUT/sass.txt"
