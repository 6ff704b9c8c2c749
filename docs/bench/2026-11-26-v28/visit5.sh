#!/usr/bin/env bash
# Version 28, GPU visit 5: the screen at 8 rows a warp (J <= 4): its tests, the greedy tests, knobs round 2,
# and gpt2-medium / gpt2-xl against the full head.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v28
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
python3 -m pytest -q -p no:cacheprovider -s tests/gpu/test_lm_screen.py > "$OUT/tests_rows8.txt" 2>&1
tail -n 3 "$OUT/tests_rows8.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_rows8.txt" | head -20
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_model_cuda.py -k "greedy_steps_run_ahead" > "$OUT/tests_greedy_rows8.txt" 2>&1
tail -n 2 "$OUT/tests_greedy_rows8.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_greedy_rows8.txt" | head
python3 $D/ab_screen_knobs.py --round2 > "$OUT/ab_screen_knobs2.txt" 2>&1; cat "$OUT/ab_screen_knobs2.txt"
python3 $D/ab_screen.py gpt2-medium,gpt2-xl > "$OUT/ab_screen_sizes.txt" 2>&1
grep -E "medium|xl" "$OUT/ab_screen_sizes.txt"
