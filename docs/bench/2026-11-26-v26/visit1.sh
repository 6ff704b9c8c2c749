#!/usr/bin/env bash
# Version 26, GPU visit 1: the balanced GEMV build's tests, its A/B against the strided build, traces.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v26
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py > "$OUT/sass_order.txt" 2>&1; tail -n 3 "$OUT/sass_order.txt"
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_linear.py -k "gemv or lm_head" > "$OUT/gpu_linear_gemv.txt" 2>&1
tail -n 3 "$OUT/gpu_linear_gemv.txt"; grep -E "^(FAILED|ERROR)" "$OUT/gpu_linear_gemv.txt" | head -20
python3 $D/ab_balanced_all.py > "$OUT/ab_balanced.txt" 2>&1; cat "$OUT/ab_balanced.txt"
python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 > "$OUT/trace_balanced.txt" 2>&1
python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 --define GEMV_NT_BALANCED_M1_BF16=0 > "$OUT/trace_strided.txt" 2>&1
cat "$OUT/trace_balanced.txt" "$OUT/trace_strided.txt" | cut -c1-330
