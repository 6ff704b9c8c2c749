#!/usr/bin/env bash
# Version 33, GPU visit 1: the one-token bf16 GEMVs in 128-thread blocks (ab_threads.py), then the step's
# timeline with the kept build and with QKV, the attention projection and FC at 128 threads.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
D=docs/bench/2026-11-27-v33
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 300 python3 $D/ab_threads.py gpt2 2>&1 | grep -v Warn | tee "$OUT/visit1_ab_threads.txt"
timeout 150 python3 - <<'PY' 2>&1 | grep -v -i warn | tee "$OUT/visit1_timeline.txt"
from gpt2block.backends import cuda_linear, make_runner
from gpt2block.config import SIZES
from gpt2block.weights import ModelWeights
from scripts.timeline_decode import run_case
r = make_runner(ModelWeights.random(SIZES["gpt2"], seed=0), "cuda", "bf16")
for name, t in (("256 (kept)", {}), ("qkv+proj+fc 128", {"qkv": 128, "proj": 128, "fc": 128})):
    cuda_linear.GEMV_NT_M1_BF16_THREADS = t
    print("==", name)
    print("\n".join(run_case(r, 1, 64)))
PY
