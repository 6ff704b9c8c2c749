#!/usr/bin/env bash
# Version 34, GPU visit 5: the final code: the benchmark's ceilings, solve, prefill, LayerNorm and decode rows
# (the LayerNorm kernel is in solve and prefill too).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT/bench"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 560 python3 scripts/bench.py --out "$OUT/bench" --sections ceilings,solve,prefill,layernorm,decode > "$OUT/bench/bench_log.txt" 2>&1
tail -n 16 "$OUT/bench/bench_log.txt"
