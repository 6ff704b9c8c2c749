#!/usr/bin/env bash
# Version 31, GPU visit 5: a captured step's embedding launched programmatically, so that layer 0's QKV may start
# (and load its weights) while the embedding runs. Predicted: if the plain node is what holds QKV0 back, its end
# moves from 6.9 to about 3 us after the embedding's: -4 us a step, bf16 b1 +2.5%; if not, no change.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 scripts/timeline_decode.py gpt2 --cases bf16:1 --steps 64 --qkv-attention off --attention-define ATTN_DEC_GROUP_SOFTMAX=0 --embed-programmatic on > "$OUT/timeline_embed_on.txt" 2>&1
head -12 "$OUT/timeline_embed_on.txt" | tail -9; tail -4 "$OUT/timeline_embed_on.txt"
python3 docs/bench/2026-11-27-v31/ab_embed.py > "$OUT/ab_embed.txt" 2>&1; cat "$OUT/ab_embed.txt"
