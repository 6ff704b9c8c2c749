#!/usr/bin/env bash
# Version 31, GPU visit 2: the fused kernel at 96 registers (visit 1 had 128: it could not start beside two MLP
# projection blocks, so some clusters started late), the first round's older keys into shared memory instead of
# registers, each weight piece's 8 products summed before they join the row's sum (shorter float32 chains).
# Predicted: if late starts were the loss, gpt2 bf16 b1 goes from -0.8% to about +5% against the two kernels.
# Then the stamped traces of both paths, to see where the fused kernel's time goes.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_attention_qkv.py > "$OUT/tests_qkv.txt" 2>&1
tail -n 1 "$OUT/tests_qkv.txt"; grep -E "^(FAILED|ERROR)|Error" "$OUT/tests_qkv.txt" | head -30
python3 docs/bench/2026-11-27-v31/ab_qkv.py > "$OUT/ab_qkv.txt" 2>&1; tail -n 12 "$OUT/ab_qkv.txt"
for f in on off; do
  python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 --qkv-attention $f --steps 12 --save "$OUT/rec_$f" > "$OUT/trace_$f.txt" 2>&1
  python3 docs/bench/2026-11-27-v30/trace_steps.py "$OUT/rec_${f}_bf16_b1.npy" > "$OUT/trace_steps_$f.txt" 2>&1
done
rm -f "$OUT"/rec_*.npy; cat "$OUT/trace_on.txt" "$OUT/trace_off.txt"; head -3 "$OUT/trace_steps_on.txt" "$OUT/trace_steps_off.txt"
