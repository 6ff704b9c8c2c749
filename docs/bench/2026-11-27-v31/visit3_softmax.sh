#!/usr/bin/env bash
# Version 31, GPU visit 3: the decode attention's rounds with a softmax per group of 16 lanes (no barrier, no
# block sum, no shuffle past the dot products in a round; the groups meet once at the end). Visit 2's trace gave
# the first round 0.95 us in attention_decode_f32 and 1.15 us in the fused kernel, of spans of 1.7 and 4.8 us.
# Predicted: the round -> about 0.3 us, -0.6 us a layer: gpt2 bf16 b1 +4%, fp32 b1 +3%, on both QKV paths.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention.py tests/gpu/test_attention_qkv.py > "$OUT/tests_attention.txt" 2>&1
tail -n 1 "$OUT/tests_attention.txt"; grep -E "^(FAILED|ERROR)|Error" "$OUT/tests_attention.txt" | head -30
python3 docs/bench/2026-11-27-v31/ab_softmax.py > "$OUT/ab_softmax.txt" 2>&1; cat "$OUT/ab_softmax.txt"
