#!/usr/bin/env bash
# Version 35, GPU visit 11: the final kernels (decode_cluster.cu as visit 7 measured it): the whole GPU suite and
# the SASS-order test.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 520 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu > "$OUT/visit11_gpu_suite.txt" 2>&1
tail -n 3 "$OUT/visit11_gpu_suite.txt"
grep -h "error vs fp64" "$OUT/visit11_gpu_suite.txt" > "$OUT/visit11_errors.txt"; tail -n 24 "$OUT/visit11_errors.txt"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py 2>&1 | tail -n 2 | tee "$OUT/visit11_sass.txt"
