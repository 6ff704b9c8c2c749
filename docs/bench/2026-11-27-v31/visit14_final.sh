#!/usr/bin/env bash
# Version 31, GPU visit 14, the final code: gemv_nt_plan's new rule (gpt2 bf16's one-token attention projection on
# 96 blocks, not 48) against the old plan in one process; the whole GPU suite; the benchmark's decode rows.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT/bench_final"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
python3 docs/bench/2026-11-27-v31/ab_plan_rule.py > "$OUT/ab_plan_rule.txt" 2>&1; cat "$OUT/ab_plan_rule.txt"
python3 -m pytest -q -s -p no:cacheprovider -m gpu tests/gpu > "$OUT/gpu_suite.txt" 2>&1
tail -n 1 "$OUT/gpu_suite.txt"; grep -E "^(FAILED|ERROR)" "$OUT/gpu_suite.txt" | head -20; grep -E "error vs fp64|err.*fp64" "$OUT/gpu_suite.txt" | head -30
python3 -m pytest -q -p no:cacheprovider tests/test_sass_order.py > "$OUT/sass.txt" 2>&1; tail -n 1 "$OUT/sass.txt"
timeout 200 python3 scripts/bench.py --out "$OUT/bench_final" --sections ceilings,decode > "$OUT/bench_final/bench_log.txt" 2>&1
tail -n 8 "$OUT/bench_final/bench_log.txt"
