#!/usr/bin/env bash
# Version 29, GPU visit 6: after the review's mends (the screen's grid from the build's J, the table allocated
# for its stream; a test of heads with subnormal and clamped rows, rows either side of 127 2^-126 in the table
# test, the narrower build refused by lm_head_screened itself): the screen's tests and the greedy tests.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_lm_screen.py tests/gpu/test_model_cuda.py -k "screen or greedy" > "$OUT/tests_review.txt" 2>&1
tail -n 1 "$OUT/tests_review.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_review.txt" | head -10
