#!/usr/bin/env bash
# Version 36, GPU visit 11: the global handoffs through a counter a cluster, each cluster's partials loaded as soon as
# it is in (DC_EAGER_GATHER 1), against the one grid counter (0): the A/B (ab_l2.py) and the traced layer of each.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 200 python3 docs/bench/2026-11-27-v36/ab_l2.py "base::" "eager:DC_EAGER_GATHER=1:" \
  2>&1 | grep -v Warn | tail -n 7 | tee "$OUT/visit11_ab_eager.txt"
for v in "" "DC_EAGER_GATHER=1"; do
  echo "== trace $v"; timeout 100 python3 docs/bench/2026-11-27-v35/trace_cluster.py $v 2>&1 | grep -v -i warn | tail -n 32
done | tee "$OUT/visit11_trace.txt"
