#!/usr/bin/env bash
# Version 36, GPU visit 7: the final kernels (decode_cluster.cu with evict-first weight copies and FC's refill after
# the first gather): the cluster kernel's tests first, then the whole GPU suite.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 100 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_decode_cluster.py > "$OUT/visit7_tests_cluster.txt" 2>&1
tail -n 1 "$OUT/visit7_tests_cluster.txt"
timeout 470 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu > "$OUT/visit7_gpu_suite.txt" 2>&1
tail -n 1 "$OUT/visit7_gpu_suite.txt"
grep -h "error vs fp64" "$OUT/visit7_gpu_suite.txt" > "$OUT/visit7_errors.txt"; wc -l < "$OUT/visit7_errors.txt"
grep -h "cluster" "$OUT/visit7_errors.txt" "$OUT/visit7_tests_cluster.txt"
