#!/usr/bin/env bash
# Version 31, GPU visit 13: the attention projection's grid at gpt2 bf16 b1 (ab_attn_wpr.py): 48, 96, 192 blocks.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 docs/bench/2026-11-27-v31/ab_attn_wpr.py > "$OUT/ab_attn_wpr.txt" 2>&1; cat "$OUT/ab_attn_wpr.txt"
