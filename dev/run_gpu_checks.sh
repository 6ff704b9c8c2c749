#!/usr/bin/env bash
# The kernel checks, the GPU tests and the benchmark in one run, from the repository root.
# Usage on the GPU machine: bash dev/run_gpu_checks.sh [checks|tests|bench|all]...
# Logs go to $OUT (or ./gpu-out); the short tables come last.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-gpu-out}"
mkdir -p "$OUT"
status=0
for what in "${@:-all}"; do
  case "$what" in
    checks|all)
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,memory.used --format=csv | tee "$OUT/gpu.txt"
      python3 dev/check_linear.py > "$OUT/check_linear.log" 2>&1 || status=1
      tail -n 40 "$OUT/check_linear.log"
      python3 dev/check_attention.py > "$OUT/check_attention.log" 2>&1 || status=1
      tail -n 40 "$OUT/check_attention.log" ;;&
    tests|all)
      python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/gpu > "$OUT/pytest_gpu.log" 2>&1 || status=1
      grep -E "passed|failed|error" "$OUT/pytest_gpu.log" | tail -n 5
      grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu.log" | head -n 30 ;;&
    bench|all)
      python3 scripts/bench.py --out "$OUT" > "$OUT/bench.log" 2>&1 || status=1
      tail -n 30 "$OUT/bench.log" ;;
  esac
done
exit $status
