#!/usr/bin/env bash
# Version 27, GPU visit 4: the embeddings in layer 0's QKV kernel: SASS order, its tests, the A/B, a trace.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v27
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py -k gemv > "$OUT/sass_embed.txt" 2>&1; tail -n 1 "$OUT/sass_embed.txt"
python3 -m pytest -q -p no:cacheprovider -s tests/gpu/test_linear.py tests/gpu/test_model_cuda.py -k "kv or embed or programmatic or greedy or lm_head" > "$OUT/tests_embed.txt" 2>&1
tail -n 1 "$OUT/tests_embed.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_embed.txt" | head -20
python3 $D/ab_embed.py > "$OUT/ab_embed.txt" 2>&1; cat "$OUT/ab_embed.txt"
timeout 100 python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 > "$OUT/trace_embed.txt" 2>&1; head -n 6 "$OUT/trace_embed.txt" | cut -c1-300
