#!/usr/bin/env bash
# Version 33, GPU visit 9: the decode step's weight-load gate: the GEMV, model and screen tests, then ab_gate.py.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
D=docs/bench/2026-11-27-v33
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
timeout 200 python3 $D/ab_gate.py gpt2 2>&1 | grep -v -i warn > "$OUT/visit9_ab_gate.txt"
grep -v "^  " "$OUT/visit9_ab_gate.txt"
awk '/== timeline/{c=0} {c++; if (/==/ || (c>=9 && c<=13) || /span|lm_/) print}' "$OUT/visit9_ab_gate.txt"
timeout 240 python3 -m pytest -q -x -p no:cacheprovider tests/gpu/test_model_cuda.py 2>&1 | tail -n 3 | tee "$OUT/visit9_tests_model.txt"
