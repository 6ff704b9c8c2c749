#!/usr/bin/env bash
# Version 26, GPU visit 2: the balanced LayerNorm GEMVs and the spread LM-head pin: tests, A/B, trace.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v26
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py tests/gpu/test_linear.py -k "sass or balanced or lm_head or nt" > "$OUT/tests_v2.txt" 2>&1
tail -n 2 "$OUT/tests_v2.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_v2.txt" | head -20
python3 $D/ab_balanced_ln.py > "$OUT/ab_balanced_ln.txt" 2>&1; cat "$OUT/ab_balanced_ln.txt"
python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 --define GEMV_LM_PIN_SPREAD=1 > "$OUT/trace_ln_spread.txt" 2>&1
cut -c1-250 "$OUT/trace_ln_spread.txt"
