#!/usr/bin/env bash
# Version 31, GPU visit 12: visit 11 found every grid smaller than the plan's slower; here larger ones (more warps a
# row group than gemv_nt_plan's rule allows, some lanes with no piece of K). Predicted: if warps in flight are what
# the GEMVs lack, +1 to 3%; the lanes left idle may cost it back.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 docs/bench/2026-11-27-v31/sweep_plan.py more > "$OUT/sweep_plan_more.txt" 2>&1; cat "$OUT/sweep_plan_more.txt"
