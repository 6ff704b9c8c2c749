#!/usr/bin/env bash
# Version 36, GPU visit 4: where the cluster kernel issues each slot's refill (DC_FETCH_QKV / _FC / _PR, 0 the
# version 35 points): the A/B (ab_l2.py with cluster defines only), then the traced layer of the default and of
# FC and W_proj fetched after the first gather.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 300 python3 docs/bench/2026-11-27-v36/ab_l2.py "base::" "qkv1:DC_FETCH_QKV=1:" "fc1:DC_FETCH_FC=1:" \
  "pr1:DC_FETCH_PR=1:" "fc1 pr1:DC_FETCH_FC=1,DC_FETCH_PR=1:" "all1:DC_FETCH_QKV=1,DC_FETCH_FC=1,DC_FETCH_PR=1:" \
  2>&1 | grep -v Warn | tail -n 20 | tee "$OUT/visit4_ab_fetch.txt"
for v in "" "DC_FETCH_FC=1 DC_FETCH_PR=1"; do
  echo "== trace $v"; timeout 100 python3 docs/bench/2026-11-27-v35/trace_cluster.py $v 2>&1 | grep -v -i warn | tail -n 32
done | tee "$OUT/visit4_trace.txt"
