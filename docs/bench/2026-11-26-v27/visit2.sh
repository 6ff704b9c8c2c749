#!/usr/bin/env bash
# Version 27, GPU visit 2: proj_fc's compile / SASS checks and GPU tests, its A/B, a trace with it.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v27
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py -k "proj_fc or attention" > "$OUT/sass_v2.txt" 2>&1; tail -n 2 "$OUT/sass_v2.txt"
python3 -m pytest -q -p no:cacheprovider -s tests/gpu/test_proj_fc.py tests/gpu/test_attention.py > "$OUT/tests_v2.txt" 2>&1
tail -n 3 "$OUT/tests_v2.txt"; grep -E "^(FAILED|ERROR)|error vs fp64|x1 error" "$OUT/tests_v2.txt" | head -40
python3 $D/ab_proj_fc.py > "$OUT/ab_proj_fc.txt" 2>&1; cat "$OUT/ab_proj_fc.txt"
timeout 120 python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 > "$OUT/trace_proj_fc.txt" 2>&1; tail -n 12 "$OUT/trace_proj_fc.txt" | cut -c1-300
