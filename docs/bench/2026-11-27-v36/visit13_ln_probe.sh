#!/usr/bin/env bash
# Version 36, GPU visit 13: visit 12's one failure (test_layernorm_kernel[7-1280-1], layernorm.cu unchanged since
# version 34): how often the test's limit fails on its data, two float64 sums against three.
set -uo pipefail
cd "$(dirname "$0")/../../.."
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 400 python3 docs/bench/2026-11-27-v36/probe_ln_test.py 2>&1 | grep -v Warn | tee "$OUT/visit13_probe_ln_test.txt"
