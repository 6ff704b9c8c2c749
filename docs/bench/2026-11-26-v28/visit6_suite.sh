#!/usr/bin/env bash
# Version 28, GPU visit 6: the whole GPU suite and the SASS load-order tests on the final code (the greedy
# LM head's int8 screen at 8 rows a warp, 16 MB kept in the L2).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py > "$OUT/sass_final.txt" 2>&1; tail -n 1 "$OUT/sass_final.txt"
python3 -m pytest -m gpu -q -rs -s -p no:cacheprovider tests/gpu > "$OUT/gpu_suite_final.txt" 2>&1
grep -E "error vs fp64" "$OUT/gpu_suite_final.txt" | tail -n 12
grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite_final.txt" | head -n 20
tail -n 1 "$OUT/gpu_suite_final.txt"
