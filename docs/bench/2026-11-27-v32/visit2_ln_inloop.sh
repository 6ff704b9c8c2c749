#!/usr/bin/env bash
# Version 32, GPU visit 2: the in-loop LayerNorm at one token (GEMV_LN_INLOOP_M1): its bit test and the GEMV /
# model / decode tests, then the A/B in one process and the timeline (ab_ln_inloop.py).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu/test_linear.py tests/gpu/test_decode_fused.py \
  tests/gpu/test_model_cuda.py > "$OUT/tests_inloop.txt" 2>&1
tail -n 1 "$OUT/tests_inloop.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_inloop.txt" | head -20
grep -E "error vs fp64" "$OUT/tests_inloop.txt" | head -12
python3 docs/bench/2026-11-27-v32/ab_ln_inloop.py > "$OUT/ab_ln_inloop.txt" 2>&1; grep -v "^  " "$OUT/ab_ln_inloop.txt" | grep -v "^$\|Warn\|_warn"
