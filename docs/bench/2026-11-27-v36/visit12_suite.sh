#!/usr/bin/env bash
# Version 36, GPU visit 12: the final code after the re-read (decode_cluster.cu with one refill switch left; its cubin
# byte-identical to visit 7's by nvcc): the cluster kernel's tests first, then the whole GPU suite.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 100 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_decode_cluster.py > "$OUT/visit12_tests_cluster.txt" 2>&1
tail -n 1 "$OUT/visit12_tests_cluster.txt"
timeout 470 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu > "$OUT/visit12_gpu_suite.txt" 2>&1
tail -n 1 "$OUT/visit12_gpu_suite.txt"
grep -h "error vs fp64" "$OUT/visit12_gpu_suite.txt" > "$OUT/visit12_errors.txt"; wc -l < "$OUT/visit12_errors.txt"
grep -h "cluster" "$OUT/visit12_errors.txt" "$OUT/visit12_tests_cluster.txt"
