#!/usr/bin/env bash
# Version 28, GPU visit 4: back to the register screen (visit 1's kernels): tests, its knobs' A/B, a trace.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v28
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
python3 -m pytest -q -p no:cacheprovider -s tests/gpu/test_lm_screen.py > "$OUT/tests_register.txt" 2>&1
tail -n 3 "$OUT/tests_register.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_register.txt" | head -20; grep candidates "$OUT/tests_register.txt" | awk '{print $(NF-1)}' | sort -n | uniq -c | tail -4
python3 scripts/trace_decode_step.py gpt2 --cases bf16:1,fp32:1 > "$OUT/trace_register.txt" 2>&1
grep -E "==|grid (264|132|396)x1" "$OUT/trace_register.txt" | cut -c1-330
python3 $D/ab_screen_knobs.py > "$OUT/ab_screen_knobs.txt" 2>&1; cat "$OUT/ab_screen_knobs.txt"
