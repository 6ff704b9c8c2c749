#!/usr/bin/env bash
# Version 32, GPU visit 6: the one-token GEMVs' weights through the copy engine (GEMV_W_BULK): the A/B first
# (ab_bulk.py), then the bit test and the GEMV / decode / model tests.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 docs/bench/2026-11-27-v32/ab_bulk.py > "$OUT/ab_bulk.txt" 2>&1; grep -v "^  \|^$\|Warn\|_warn" "$OUT/ab_bulk.txt"
awk '/timeline/{print} /step span/{print}' "$OUT/ab_bulk.txt"
python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_linear.py -k "shared_memory" > "$OUT/tests_bulk_bits.txt" 2>&1
tail -n 1 "$OUT/tests_bulk_bits.txt"; grep -E "^(FAILED|ERROR)|Error" "$OUT/tests_bulk_bits.txt" | head -20
python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_linear.py tests/gpu/test_decode_fused.py \
  tests/gpu/test_model_cuda.py > "$OUT/tests_bulk.txt" 2>&1
tail -n 1 "$OUT/tests_bulk.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_bulk.txt" | head -20
grep -E "error vs fp64" "$OUT/tests_bulk.txt" | head -12
