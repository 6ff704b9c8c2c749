#!/usr/bin/env bash
# Version 36, GPU visit 8: the final code: the whole benchmark in one run (every section, gpt2-xl included).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT/bench_final"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
SECONDS=0
timeout 560 python3 scripts/bench.py --out "$OUT/bench_final" > "$OUT/bench_final/bench_log.txt" 2>&1
echo "bench: rc $? in $SECONDS s"
grep -A 13 "^| what" "$OUT/bench_final/bench_log.txt"
