#!/usr/bin/env bash
# Version 31, GPU visit 11: the one-token GEMVs' grids per matrix (sweep_plan.py). Predicted: if the MLP
# projection's late blocks are what its 2.3 us holds beyond the attention projection's 1.6, FC at 96 blocks
# gives it room and the step gains up to 0.5 us a layer; FC's own work per warp doubles, so it may lose it.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 docs/bench/2026-11-27-v31/sweep_plan.py fewer > "$OUT/sweep_plan.txt" 2>&1; cat "$OUT/sweep_plan.txt"
