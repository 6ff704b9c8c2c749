#!/usr/bin/env bash
# Version 31, GPU visit 1: ln_1 + QKV + attention in one cluster kernel (kernels/attention_qkv.cu) at batch 1,
# bf16. Predicted: a layer loses the QKV -> attention boundary (release about 0.45 us, the attention's q and new
# key read back through the L2, the QKV stragglers on shared SMs): about -1.1 us a layer, -13 us of a 155-us
# step, gpt2 bf16 b1 +7 to +9% against the two-kernel path on the same card.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention_qkv.py > "$OUT/tests_qkv.txt" 2>&1
tail -n 1 "$OUT/tests_qkv.txt"; grep -E "^(FAILED|ERROR)|Error|error" "$OUT/tests_qkv.txt" | head -30
python3 docs/bench/2026-11-27-v31/ab_qkv.py > "$OUT/ab_qkv.txt" 2>&1; cat "$OUT/ab_qkv.txt" | tail -20
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention.py > "$OUT/tests_attention.txt" 2>&1
tail -n 1 "$OUT/tests_attention.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_attention.txt" | head -20
