#!/usr/bin/env bash
# Version 36, GPU visit 2: the final code: the benchmark's ceilings, solve, prefill, LayerNorm and decode rows.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT/bench"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
SECONDS=0
timeout 570 python3 scripts/bench.py --out "$OUT/bench" --sections ceilings,solve,prefill,layernorm,decode > "$OUT/bench/bench_log.txt" 2>&1
echo "bench: rc $? in $SECONDS s"
tail -n 16 "$OUT/bench/bench_log.txt"
