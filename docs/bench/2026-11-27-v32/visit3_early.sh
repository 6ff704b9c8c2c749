#!/usr/bin/env bash
# Version 32, GPU visit 3: chained steps with layer 0's QKV launched under the step before (probe_early.py).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 docs/bench/2026-11-27-v32/probe_early.py > "$OUT/probe_early.txt" 2>&1; cat "$OUT/probe_early.txt"
