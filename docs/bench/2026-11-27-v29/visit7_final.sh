#!/usr/bin/env bash
# Version 29, GPU visit 7: test_lm_screen.py after its full-head reference moved into one helper (_full_head),
# the last change of the session; the greedy tests beside it.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_lm_screen.py tests/gpu/test_model_cuda.py -k "screen or greedy" > "$OUT/tests_final.txt" 2>&1
tail -n 1 "$OUT/tests_final.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_final.txt" | head -10; true
