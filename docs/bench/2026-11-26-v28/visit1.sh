#!/usr/bin/env bash
# Version 28, GPU visit 1: the screened LM head's tests, the greedy tests, its A/B.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v28
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv | tee "$OUT/gpu.txt"
python3 -m pytest -q -p no:cacheprovider -x tests/gpu/test_lm_screen.py -k "bad_arguments or h_out or (768-50257 and random)" > "$OUT/tests_screen_quick.txt" 2>&1
tail -n 5 "$OUT/tests_screen_quick.txt"; grep -E "^(FAILED|ERROR|E )" "$OUT/tests_screen_quick.txt" | head -30
python3 $D/ab_screen.py 2 > "$OUT/ab_screen_quick.txt" 2>&1; cat "$OUT/ab_screen_quick.txt" | tail -20
python3 -m pytest -q -p no:cacheprovider -s tests/gpu/test_lm_screen.py > "$OUT/tests_screen.txt" 2>&1
tail -n 3 "$OUT/tests_screen.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_screen.txt" | head -20; grep candidates "$OUT/tests_screen.txt" | sort | uniq -c | sort -rn | head -5
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_model_cuda.py tests/gpu/test_linear.py -k "greedy or lm_head or programmatic" > "$OUT/tests_greedy.txt" 2>&1
tail -n 3 "$OUT/tests_greedy.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_greedy.txt" | head -20
