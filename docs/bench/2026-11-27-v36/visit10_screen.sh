#!/usr/bin/env bash
# Version 36, GPU visit 10: the cluster kernel's tests again (the out-of-range test's helper now a def), then the LM
# screen's build under the final cluster kernel: blocks a SM (LM_SCREEN_MIN_BLOCKS 2, the default; 1; 3), rows a warp
# (8, the default; 4) and the table's bytes kept in the L2 (16 MB, the default; 0; 24 MB), gpt2 bf16 b1 tok/s.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 100 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_decode_cluster.py 2>&1 | tail -n 1 | tee "$OUT/visit10_tests_cluster.txt"
timeout 400 python3 docs/bench/2026-11-27-v36/ab_l2.py "base::" "1 a SM::LM_SCREEN_MIN_BLOCKS=1" \
  "3 a SM::LM_SCREEN_MIN_BLOCKS=3" "4 rows::LM_SCREEN_ROWS=4" "none kept::LM_SCREEN_PIN_BYTES=0ll" \
  "24 MB kept::LM_SCREEN_PIN_BYTES=25165824ll" 2>&1 | grep -v Warn | tail -n 19 | tee "$OUT/visit10_ab_screen.txt"
