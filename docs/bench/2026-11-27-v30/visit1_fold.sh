#!/usr/bin/env bash
# Version 30, GPU visit 1: ln_1 and ln_2 folded into the batch-1 QKV and FC products (cuda.FOLD_LN,
# gemv_*_nt_lnfold_*). Predicted: each of those 24 kernels a step ends about 0.6 us sooner (its products no
# longer wait for the whole row, its statistics and its normalization), about -14 us of version 28's 154.5-us
# bf16 b1 step on the H200 (+9%); on this card from 6,021 to about 6,500 tok/s bf16 b1, fp32 b1 +5-7%.
# The fold's tests first, then the A/B in one process, then the stamped trace of both builds. (On the H100 the
# visit ran this script without its last three lines, then those traces as a second command, logs visit1_trace_*.)
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_linear.py -k "fold or gemv" > "$OUT/tests_linear.txt" 2>&1
tail -n 1 "$OUT/tests_linear.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_linear.txt" | head -20
python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_decode_fused.py -k folded > "$OUT/tests_folded_step.txt" 2>&1
tail -n 1 "$OUT/tests_folded_step.txt"; grep -E "^(FAILED|ERROR)|error vs fp64" "$OUT/tests_folded_step.txt" | head -20
python3 docs/bench/2026-11-27-v30/ab_fold.py > "$OUT/ab_fold.txt" 2>&1; cat "$OUT/ab_fold.txt"
python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 --fold on > "$OUT/trace_fold.txt" 2>&1
python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 --fold off > "$OUT/trace_staged.txt" 2>&1
grep -E "LayerNorm|==" "$OUT/trace_fold.txt" "$OUT/trace_staged.txt" | cut -c1-400
