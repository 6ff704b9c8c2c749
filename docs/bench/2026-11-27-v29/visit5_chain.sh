#!/usr/bin/env bash
# Version 29, GPU visit 5: greedy_steps' chained steps CHAIN_STEPS to a CUDA graph (1 = version 28's one a
# graph). Predicted, from version 28's trace (about 5.6 us from the rescore's end to layer 0's QKV across a
# graph boundary, about 2 us inside a graph): -1.8 us a step at 2 (bf16 b1 +1.1% on this H100), -2.7 us at 4
# (+1.6%), -3.2 us at 8 (+1.9%). Then the greedy, generate and screen tests on the GPU.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 -m pytest -q -p no:cacheprovider tests/gpu/test_model_cuda.py -k "greedy" > "$OUT/tests_greedy.txt" 2>&1
tail -n 1 "$OUT/tests_greedy.txt"; grep -E "^(FAILED|ERROR)" "$OUT/tests_greedy.txt" | head -10
python3 docs/bench/2026-11-27-v29/ab_chain.py > "$OUT/ab_chain.txt" 2>&1; cat "$OUT/ab_chain.txt"
