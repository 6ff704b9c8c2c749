#!/usr/bin/env bash
# Version 33, GPU visit 2: the one-token GEMVs' weights through shared memory (ab_wsmem.py), then the step's
# timeline (bf16) with the kept build and with the weights in shared memory at 4 blocks a SM.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
D=docs/bench/2026-11-27-v33
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 330 python3 $D/ab_wsmem.py gpt2 2>&1 | grep -v Warn | tee "$OUT/visit2_ab_wsmem.txt"
timeout 150 python3 - <<'PY' 2>&1 | grep -v -i warn > "$OUT/visit2_timeline.txt"
import sys
sys.argv = ["x"]
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.timeline_decode import run_case
r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "bf16")
ALL = {"qkv", "proj", "fc", "mlp_proj"}
for name, sw, nt in (("registers (kept)", {}, ()), ("smem, 4 blocks/SM", {"bf16": ALL}, (("GEMV_NT_MIN_BLOCKS_ROWS4", 4),))):
    cuda_linear.GEMV_W_SMEM_M1, cuda_linear.NT_DEFINES = sw, nt
    print("==", name)
    print("\n".join(run_case(r, 1, 64)))
PY
awk '/==/{c=0} {c++; if (c<=15 || /span|lm_/) print}' "$OUT/visit2_timeline.txt"
