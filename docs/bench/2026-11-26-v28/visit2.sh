#!/usr/bin/env bash
# Version 28, GPU visit 2: the staged screen (bulk copies before the wait): tests, head timings, A/B.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v28
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
python3 -m pytest -q -p no:cacheprovider -x tests/gpu/test_lm_screen.py -k "bad_arguments or h_out or (768-50257 and random)" > "$OUT/tests_staged_quick.txt" 2>&1
tail -n 5 "$OUT/tests_staged_quick.txt"; grep -E "^(FAILED|ERROR|E )" "$OUT/tests_staged_quick.txt" | head -30
python3 $D/time_heads.py > "$OUT/time_heads.txt" 2>&1; cat "$OUT/time_heads.txt" | tail -8
python3 $D/ab_screen.py 2 > "$OUT/ab_staged.txt" 2>&1; cat "$OUT/ab_staged.txt" | tail -14
python3 -m pytest -q -p no:cacheprovider -s tests/gpu/test_lm_screen.py > "$OUT/tests_staged.txt" 2>&1
tail -n 3 "$OUT/tests_staged.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_staged.txt" | head -20; grep candidates "$OUT/tests_staged.txt" | awk '{print $(NF-1)}' | sort -n | tail -3
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_model_cuda.py tests/gpu/test_decode_fused.py -k "greedy or programmatic" > "$OUT/tests_greedy2.txt" 2>&1
tail -n 3 "$OUT/tests_greedy2.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_greedy2.txt" | head -20
