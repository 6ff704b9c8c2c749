#!/usr/bin/env bash
# Version 31, GPU visit 6: a probe of the step's start. Visits 4 and 5 had layer 0's QKV start 2.8 us after the
# embedding ended, with the embedding launched plainly or programmatically. Here a no-op kernel goes first in the
# captured step and the embedding after it, programmatic: does the second node of a graph start late whatever
# it is (then QKV0 would overlap the embedding), or is it QKV0's own start?
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 scripts/timeline_decode.py gpt2 --cases bf16:1 --steps 64 --qkv-attention off --attention-define ATTN_DEC_GROUP_SOFTMAX=0 --step-head on > "$OUT/timeline_head.txt" 2>&1
head -13 "$OUT/timeline_head.txt" | tail -10; tail -4 "$OUT/timeline_head.txt"
python3 - > "$OUT/ab_head.txt" 2>&1 <<'PY'
from gpt2block.backends import cuda, cuda_attention, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.decode_rate import rate
cuda.QKV_ATTENTION = False
cuda_attention.DECODE_DEFINES = (("ATTN_DEC_GROUP_SOFTMAX", 0),)
r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "bf16")
for rnd in range(3):
    for head in (False, True):
        cuda.STEP_HEAD = head
        print(f"round {rnd} gpt2 bf16 b1 step head {'on' if head else 'off'}: {rate(r, 1, 128):,.0f} tok/s", flush=True)
PY
cat "$OUT/ab_head.txt"
