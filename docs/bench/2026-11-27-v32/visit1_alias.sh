#!/usr/bin/env bash
# Version 32, GPU visit 1: the weights-aliased diagnostic (probe_alias.py), bf16 then fp32.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 docs/bench/2026-11-27-v32/probe_alias.py bf16 fp32 > "$OUT/probe_alias.txt" 2>&1; cat "$OUT/probe_alias.txt"
