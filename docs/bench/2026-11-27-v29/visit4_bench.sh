#!/usr/bin/env bash
# Version 29, GPU visit 4: the benchmark on the final code, in two parts (a command may run 10 minutes):
#   bash visit4_bench.sh decode   ceilings, LayerNorm, decode, decode_xl
#   bash visit4_bench.sh rest     ceilings, solve, prefill
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD"
OUT="${OUT:-gpu-out}"; mkdir -p "$OUT/bench_$1"
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
case "$1" in
  decode) S=ceilings,layernorm,decode,decode_xl ;;
  rest) S=ceilings,solve,prefill ;;
  *) echo "part: decode or rest"; exit 2 ;;
esac
python3 scripts/bench.py --out "$OUT/bench_$1" --sections $S > "$OUT/bench_$1/bench_log.txt" 2>&1
tail -n 12 "$OUT/bench_$1/bench_log.txt"
