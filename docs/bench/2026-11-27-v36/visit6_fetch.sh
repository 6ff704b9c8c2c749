#!/usr/bin/env bash
# Version 36, GPU visit 6: with FC's refill after the first gather (the new default), W_attn's refill there too
# (DC_FETCH_O 1) and W_proj's split in halves, after the MLP arrival and after the first gather (DC_FETCH_PR 4).
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 python3 docs/bench/2026-11-27-v36/ab_l2.py "base::" "o1:DC_FETCH_O=1:" "pr4:DC_FETCH_PR=4:" \
  "o1 pr4:DC_FETCH_O=1,DC_FETCH_PR=4:" 2>&1 | grep -v Warn | tail -n 13 | tee "$OUT/visit6_ab_fetch.txt"
