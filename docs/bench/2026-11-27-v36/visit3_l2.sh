#!/usr/bin/env bash
# Version 36, GPU visit 3: the cluster kernel's weight copies evict-first in the L2 (DC_W_EVICT_FIRST) against no
# hint, with 16 (the default), 24, 32 and all MB of the LM screen's table kept: tests of the kernel, the A/B, and
# the timeline of a cluster step.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_decode_cluster.py 2>&1 | tail -2 | tee "$OUT/visit3_tests_cluster.txt"
P=LM_SCREEN_PIN_BYTES
timeout 330 python3 docs/bench/2026-11-27-v36/ab_l2.py "no hint, 16 MB:DC_W_EVICT_FIRST=0:" "evict-first, 16 MB::" \
  "evict-first, 24 MB::$P=25165824ll" "evict-first, 32 MB::$P=33554432ll" "evict-first, all::$P=67108864ll" \
  "no hint, 32 MB:DC_W_EVICT_FIRST=0:$P=33554432ll" 2>&1 | grep -v Warn | tail -n 20 | tee "$OUT/visit3_ab_l2.txt"
timeout 100 python3 scripts/timeline_decode.py --cases bf16:1 --cluster on --steps 40 2>&1 | grep -v -i warn | tail -n 12 | tee "$OUT/visit3_timeline.txt"
