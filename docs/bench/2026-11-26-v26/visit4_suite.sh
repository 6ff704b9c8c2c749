#!/usr/bin/env bash
# Version 26, GPU visit 4: the whole GPU suite and the SASS load-order tests on the final code.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
git log --oneline -1 2>/dev/null | tee -a "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py tests/test_kernels_compile.py > "$OUT/sass_compile.txt" 2>&1; tail -n 1 "$OUT/sass_compile.txt"
python3 -m pytest -m gpu -q -rs -s -p no:cacheprovider tests/gpu > "$OUT/gpu_suite_final.txt" 2>&1
grep -E "error vs fp64" "$OUT/gpu_suite_final.txt" | tail -n 12
grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite_final.txt" | head -n 20
tail -n 1 "$OUT/gpu_suite_final.txt"
