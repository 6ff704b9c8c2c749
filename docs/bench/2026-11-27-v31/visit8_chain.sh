#!/usr/bin/env bash
# Version 31, GPU visit 8: K steps a graph with the steps after the first chained (their embedding programmatic,
# letting the kernels after it launch only after its wait), against plain embeddings (visit 7: no gain at any K).
# Visit 6 found that a programmatic kernel right after a plainly launched one starts about 4.4 us after that one's
# start, whatever it is; chained, no step starts behind a plain launch except a graph's first. Predicted: -4 to
# -5 us a step at K = 16, bf16 b1 +3%.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 docs/bench/2026-11-27-v31/probe_chain.py > "$OUT/probe_chain.txt" 2>&1; cat "$OUT/probe_chain.txt"
