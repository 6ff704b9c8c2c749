#!/usr/bin/env bash
# Version 33, GPU visit 15: the final code (the one-token LayerNorm built for its K): the benchmark's
# ceilings, LayerNorm and decode rows again on this session's H200.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT/bench"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 300 python3 scripts/bench.py --out "$OUT/bench" --sections ceilings,layernorm,decode > "$OUT/bench/bench_log.txt" 2>&1
tail -n 14 "$OUT/bench/bench_log.txt"
