#!/usr/bin/env bash
# Version 36, GPU visit 1: decode_cluster.cu with out-of-range lengths and positions clamped (no key read, no
# cache write, NaN), and the host-side mends of session 35 that ran on the CPU only: the new test file first,
# then the whole GPU suite.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 90 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_decode_cluster.py > "$OUT/visit1_tests_cluster.txt" 2>&1
tail -n 3 "$OUT/visit1_tests_cluster.txt"
timeout 480 python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu > "$OUT/visit1_gpu_suite.txt" 2>&1
tail -n 3 "$OUT/visit1_gpu_suite.txt"
grep -h "error vs fp64" "$OUT/visit1_gpu_suite.txt" > "$OUT/visit1_errors.txt"; wc -l < "$OUT/visit1_errors.txt"
grep -h "cluster" "$OUT/visit1_errors.txt" | tail -n 9
