#!/usr/bin/env bash
# Version 31, GPU visit 7: K greedy steps to a graph, replayed back to back (probe_chain.py). Predicted from the
# timelines: inside a graph a step's start costs about 5 us instead of 10 (the embedding after the rescore, then
# layer 0's QKV under it), so at K = 4 about -3.7 us a step, bf16 b1 +2.4%. Version 29 measured greedy_steps with
# 2-8 steps a graph on an H100: at most +0.5%.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 docs/bench/2026-11-27-v31/probe_chain.py > "$OUT/probe_chain.txt" 2>&1; cat "$OUT/probe_chain.txt"
