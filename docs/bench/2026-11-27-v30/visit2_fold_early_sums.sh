#!/usr/bin/env bash
# Version 30, GPU visit 2: the fold with the statistics' sums taken from x before the products (visit 1 took
# them after the products: the QKV kernel's stats came 0.9 us after its products, end 2.80 us against the
# staged 2.57; bf16 b1 -3%). Predicted: the tail after the products shrinks to the warps' sums added up
# (about 0.1 us) and the products start about 0.25 us later: the LayerNorm GEMVs end about 0.1-0.3 us sooner
# than the staged ones, bf16 b1 +1-4% against the staged path. The fold's tests, the A/B, both traces.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_linear.py -k "fold" > "$OUT/tests_linear_fold.txt" 2>&1
tail -n 1 "$OUT/tests_linear_fold.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_linear_fold.txt" | head -20
python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_decode_fused.py -k folded > "$OUT/tests_folded_step.txt" 2>&1
tail -n 1 "$OUT/tests_folded_step.txt"; grep -E "^(FAILED|ERROR)|error vs fp64" "$OUT/tests_folded_step.txt" | head -20
python3 docs/bench/2026-11-27-v30/ab_fold.py > "$OUT/ab_fold.txt" 2>&1; cat "$OUT/ab_fold.txt"
for f in on off; do python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 --fold $f > "$OUT/trace_$f.txt" 2>&1; done
grep -E "144x1|192x1" "$OUT/trace_on.txt" "$OUT/trace_off.txt" | grep LayerNorm | cut -c1-330 | head -8
