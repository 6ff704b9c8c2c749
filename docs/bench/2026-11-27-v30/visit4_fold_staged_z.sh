#!/usr/bin/env bash
# Version 30, GPU visit 4: the fold with z = g x staged by the block (each thread's own pieces of x, their
# statistics' sums and their scaling by g, then one barrier), the products reading z from shared memory as
# the staged path reads its normalized row; the sums added up after the products. Visits 1 and 2 read x
# through L1 in the product loop and were slower (3%, 1.6%). Predicted: the products start about 0.45 us
# sooner in each of the 24 LayerNorm GEMVs a step (no sums added up, no normalization, no second barrier
# before them), -10 us a step: gpt2 bf16 b1 +5-7% against the staged path on the same card.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 docs/bench/2026-11-27-v30/ab_fold.py > "$OUT/ab_fold.txt" 2>&1; cat "$OUT/ab_fold.txt"
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_linear.py -k "fold" > "$OUT/tests_linear_fold.txt" 2>&1
tail -n 1 "$OUT/tests_linear_fold.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_linear_fold.txt" | head -20
python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_decode_fused.py -k folded > "$OUT/tests_folded_step.txt" 2>&1
tail -n 1 "$OUT/tests_folded_step.txt"; grep -E "^(FAILED|ERROR)|error vs fp64" "$OUT/tests_folded_step.txt" | head -20
for f in on off; do python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 --fold $f --steps 12 --save "$OUT/rec_$f" > "$OUT/trace_$f.txt" 2>&1; done
python3 docs/bench/2026-11-27-v30/trace_steps.py "$OUT/rec_on_bf16_b1.npy" "$OUT/rec_off_bf16_b1.npy" > "$OUT/trace_steps.txt" 2>&1
rm -f "$OUT"/rec_*.npy; head -14 "$OUT/trace_steps.txt"
