#!/usr/bin/env bash
# Version 31, GPU visit 4: why shorter attention kernels made the step slower (visit 3: the per-group softmax
# -1.8%, the fused QKV + attention -1.7%, while the stamped traces had both shorter). The CUDA profiler's
# timeline (unstamped kernels) of a bf16 b1 step, kernel by kernel (each kernel's end after the end before it),
# for the block softmax and the group softmax on the two-kernel path, and the fused kernel with the block softmax.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
run() { python3 scripts/timeline_decode.py gpt2 --cases bf16:1 --steps 64 "$@"; }
run --qkv-attention off --attention-define ATTN_DEC_GROUP_SOFTMAX=0 > "$OUT/timeline_block.txt" 2>&1
run --qkv-attention off --attention-define ATTN_DEC_GROUP_SOFTMAX=1 > "$OUT/timeline_group.txt" 2>&1
run --qkv-attention on --attention-define ATTN_DEC_GROUP_SOFTMAX=0 > "$OUT/timeline_fused.txt" 2>&1
for f in block group fused; do echo "== $f"; head -20 "$OUT/timeline_$f.txt"; tail -4 "$OUT/timeline_$f.txt"; done
