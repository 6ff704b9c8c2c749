#!/usr/bin/env bash
# Version 26, GPU visit 3: the batch-1 chain's tests, its A/B against the five-kernel step, a trace.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
D=docs/bench/2026-11-26-v26
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT"
python3 -m pytest -q -p no:cacheprovider -x tests/gpu/test_linear.py -k chain 2>&1 | tee "$OUT/tests_chain_linear.txt" | tail -n 15
python3 -m pytest -q -s -p no:cacheprovider tests/gpu/test_decode_chain.py 2>&1 | tee "$OUT/tests_decode_chain.txt" | grep -E "error vs|passed|failed|Error|assert" | tail -n 30
python3 $D/ab_chain_dropped.py 2>&1 | tee "$OUT/ab_chain.txt"
python3 scripts/trace_decode_step.py gpt2 --cases bf16:1 2>&1 | tee "$OUT/trace_chain.txt" | cut -c1-250
