#!/usr/bin/env bash
# Version 31, GPU visit 10: version 30's second fold (ln_1 and ln_2 folded into the QKV and FC products, x read
# through L1 in the product loop as the projections read theirs) with the row's statistics from (sum, sum of
# squares) pairs that the projection before writes for each of its row groups, added up by the LayerNorm GEMV
# after its products: no block reduction of x, only the pairs' float64 total and one barrier left after the
# products. Predicted: -0.2 to -0.6 us in each of the 22 LayerNorm GEMVs that read pairs, bf16 b1 +3 to +8%
# against the staged path (version 30 measured the fold with the statistics from x 1.6% slower).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_linear.py -k "fold or stats" > "$OUT/tests_linear_stats.txt" 2>&1
tail -n 1 "$OUT/tests_linear_stats.txt"; grep -E "^(FAILED|ERROR)|Error" "$OUT/tests_linear_stats.txt" | head -20
python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_decode_fused.py -k folded > "$OUT/tests_folded_step.txt" 2>&1
tail -n 1 "$OUT/tests_folded_step.txt"; grep -E "^(FAILED|ERROR)|error vs fp64" "$OUT/tests_folded_step.txt" | head -20
python3 docs/bench/2026-11-27-v31/ab_stats.py > "$OUT/ab_stats.txt" 2>&1; grep -v "^  gemv\|^  attention\|Warning\|warn" "$OUT/ab_stats.txt" | head -40
