#!/usr/bin/env bash
# Version 36, GPU visit 5: the FC and W_proj refills at each point of the layer (DC_FETCH_FC / _PR 0-3): the A/B
# (ab_l2.py with cluster defines only), then the traced layer of FC at 1 and W_proj at 3.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
F=DC_FETCH_FC; P=DC_FETCH_PR
timeout 400 python3 docs/bench/2026-11-27-v36/ab_l2.py "base::" "fc1:$F=1:" "fc2:$F=2:" "fc3:$F=3:" \
  "fc1 pr2:$F=1,$P=2:" "fc1 pr3:$F=1,$P=3:" "fc2 pr3:$F=2,$P=3:" "fc2 pr1:$F=2,$P=1:" "fc3 pr1:$F=3,$P=1:" \
  2>&1 | grep -v Warn | tail -n 28 | tee "$OUT/visit5_ab_fetch.txt"
for v in "DC_FETCH_FC=1" "DC_FETCH_FC=1 DC_FETCH_PR=3"; do
  echo "== trace $v"; timeout 100 python3 docs/bench/2026-11-27-v35/trace_cluster.py $v 2>&1 | grep -v -i warn | tail -n 32
done | tee "$OUT/visit5_trace.txt"
