#!/usr/bin/env bash
# Version 36, GPU visit 14: visit 13's probe at one row, 2,000 draws a width: do two float64 sums fail the test's
# limit more often than three?
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 python3 docs/bench/2026-11-27-v36/probe_ln_test.py 2000 1 2>&1 | grep -v Warn | tee "$OUT/visit14_probe_ln_test.txt"
