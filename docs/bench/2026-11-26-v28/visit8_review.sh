#!/usr/bin/env bash
# Version 28, GPU visit 8: after the review's fixes (h below 2^-100 unbounded, the -ftz widening, the
# LayerNorm build the full head uses, the table made before the step): the screen, greedy, GEMV and
# SASS tests; a first run with CuPy's cache empty, then again; one A/B round.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v28
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
python3 scripts/make_random_checkpoint.py gpt2 /tmp/ck --tokenizer-dir .tok > /dev/null 2>&1 || echo "checkpoint failed"
{ echo "# CUPY_CACHE_DIR empty, then again: time python3 -m gpt2block generate --backend cuda -m /tmp/ck -n 24 -t 0 \"The H200 is\""
  export CUPY_CACHE_DIR=$(mktemp -d)
  for run in cold warm; do echo "## $run"; ( time python3 -m gpt2block generate --backend cuda -m /tmp/ck -n 24 -t 0 "The H200 is" ) 2>&1; done
  echo "## warm, bf16"; ( time python3 -m gpt2block generate --backend cuda --precision bf16 -m /tmp/ck -n 24 -t 0 "The H200 is" ) 2>&1
} > "$OUT/start-up.log" 2>&1
grep -E "^##|real|compiled|tokens in" "$OUT/start-up.log"
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_lm_screen.py tests/gpu/test_linear.py tests/gpu/test_model_cuda.py -k "screen or greedy or lm_head or bad_arguments or programmatic" > "$OUT/tests_review.txt" 2>&1
tail -n 2 "$OUT/tests_review.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_review.txt" | head -20
python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py > "$OUT/sass_review.txt" 2>&1; tail -n 1 "$OUT/sass_review.txt"
python3 $D/ab_screen.py 2 > "$OUT/ab_review.txt" 2>&1; tail -n 12 "$OUT/ab_review.txt"
